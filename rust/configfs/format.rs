// SPDX-License-Identifier: GPL-2.0

//! The text of the attributes that show what an endpoint does: `state`,
//! `stats`, `qp_attrs`, `remote_ece`, `connections`, `last_error` and `netns`.
//!
//! Each function reads the endpoint once (see its readers in `crate::echo`;
//! `stats` reads the stats, then the QP read back for the advisor's lines)
//! and writes the attribute's lines; the ABI is documented in
//! `Documentation/ABI/testing/configfs-cmecho`.

use crate::echo::{advisor, percentile, ConnView, Endpoint, State, StatsReading};
use crate::rdma::ConnState;

/// Writes `state`.
pub(super) fn state(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let name = match ep.state() {
        State::Idle => "idle",
        State::Listening => "listening",
        State::Connecting => "connecting",
        State::Running => "running",
        State::Done => "done",
        State::Error => "error",
    };
    writeln!(w, "{}", name)
}

/// Writes `stats`: one `key value` per line.
pub(super) fn stats(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let StatsReading {
        stats: s,
        active,
        mut samples,
    } = ep.read_stats();
    // The p99 round trip, for the advisor below.
    let mut p99_us = None;
    writeln!(w, "pings {}", s.pings)?;
    writeln!(w, "bytes {}", s.bytes)?;
    writeln!(w, "errors {}", s.errors)?;
    writeln!(w, "verify_errors {}", s.verify_errors)?;
    writeln!(w, "connections {}", s.connections)?;
    writeln!(w, "connect_failed {}", s.connect_failed)?;
    writeln!(w, "rejected {}", s.rejected)?;
    writeln!(w, "accept_timeouts {}", s.accept_timeouts)?;
    writeln!(w, "logs_suppressed {}", s.logs_suppressed)?;
    writeln!(w, "softirq_pings {}", s.softirq_pings)?;
    writeln!(w, "active {}", active)?;
    for (status, n) in s.wc_errors.iter().filter(|e| e.1 > 0) {
        writeln!(w, "wc_error_status_{} {}", status, n)?;
    }
    if let Some(avg) = s.rtt_sum_us.checked_div(s.rtt_n) {
        writeln!(w, "rtt_min_us {}", s.rtt_min_us)?;
        writeln!(w, "rtt_avg_us {}", avg)?;
        let mut pct = |p| match samples.as_mut() {
            Ok(v) => percentile(v, p),
            Err(_) => None,
        };
        match (pct(50), pct(99)) {
            (Some(p50), Some(p99)) => {
                writeln!(w, "rtt_p50_us {}", p50)?;
                writeln!(w, "rtt_p99_us {}", p99)?;
                p99_us = Some(u64::from(p99));
            }
            // No memory to copy the samples into: say so rather than guess.
            _ => {
                writeln!(w, "rtt_p50_us -")?;
                writeln!(w, "rtt_p99_us -")?;
            }
        }
        writeln!(w, "rtt_max_us {}", s.rtt_max_us)?;
        writeln!(w, "rtt_samples {}", samples.as_ref().map_or(0, |v| v.len()))?;
        for (i, n) in s.rtt_hist.iter().enumerate().filter(|(_, n)| **n > 0) {
            writeln!(w, "rtt_hist_lt_{}us {}", 1u64 << (i + 1), n)?;
        }
    } else {
        for k in ["min", "avg", "p50", "p99", "max"] {
            writeln!(w, "rtt_{}_us -", k)?;
        }
        writeln!(w, "rtt_samples 0")?;
    }
    key_or_dash(w, "run_us", (s.run_us != 0).then_some(s.run_us))?;
    let mbit_s = match (s.run_us, s.bytes) {
        (0, _) | (_, 0) => None,
        (us, b) => Some(b * 8 / us),
    };
    key_or_dash(w, "throughput_mbit_s", mbit_s)?;
    writeln!(w, "detections {}", s.detect_n)?;
    let detect_us = (s.detect_n != 0).then_some(s.detect_last_us);
    key_or_dash(w, "detect_us", detect_us)?;
    // The ack-timeout advisor: the T these round trips ask for, and how long
    // a dead peer takes to be noticed at it and at the QP's own T, with the
    // QP's retry count (read back from the last established connection).
    let qp = ep.read_back().map(|rb| rb.qp);
    let suggested = p99_us.map(|p99| advisor::suggest(p99, s.rtt_max_us));
    let bound = |t: Option<u8>| {
        t.zip(qp)
            .and_then(|(t, q)| advisor::detect_bound_ms(t, q.retry_cnt))
    };
    key_or_dash(w, "suggested_ack_timeout", suggested)?;
    key_or_dash(w, "suggested_detect_bound_ms", bound(suggested))?;
    key_or_dash(w, "detect_bound_ms", bound(qp.map(|q| q.timeout)))
}

/// Writes `key value`, or `key -` for none.
fn key_or_dash(
    w: &mut impl core::fmt::Write,
    key: &str,
    v: Option<impl core::fmt::Display>,
) -> core::fmt::Result {
    match v {
        Some(v) => writeln!(w, "{} {}", key, v),
        None => writeln!(w, "{} -", key),
    }
}

/// Writes `qp_attrs`: what the last established connection's QP got.
pub(super) fn qp_attrs(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let Some(rb) = ep.read_back() else {
        return writeln!(w, "none");
    };
    let q = rb.qp;
    writeln!(w, "qp_num {}", q.qp_num)?;
    writeln!(w, "state {}", q.state_name())?;
    writeln!(w, "timeout {}", q.timeout)?;
    writeln!(w, "retry_cnt {}", q.retry_cnt)?;
    writeln!(w, "rnr_retry {}", q.rnr_retry)?;
    writeln!(w, "min_rnr_timer {}", q.min_rnr_timer)?;
    writeln!(w, "path_mtu {}", q.path_mtu)?;
    key_or_dash(w, "packet_life_time", rb.plt)?;
    key_or_dash(w, "traffic_class", rb.tclass)?;
    writeln!(w, "remote_ece_vendor_id {:#x}", rb.remote_ece.vendor_id)?;
    writeln!(w, "remote_ece_attr_mod {:#x}", rb.remote_ece.attr_mod)
}

/// Writes `remote_ece`: the ECE the peer of the last established connection sent.
pub(super) fn remote_ece(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let e = ep.read_back().map(|rb| rb.remote_ece).unwrap_or_default();
    writeln!(w, "vendor_id {:#x}", e.vendor_id)?;
    writeln!(w, "attr_mod {:#x}", e.attr_mod)
}

/// Writes `connections`: one line per connection of the endpoint.
pub(super) fn connections(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    let conns = ep.connections();
    let mut lines = LineBudget {
        w,
        left: CONNECTIONS_BUDGET,
    };
    for (n, c) in conns.iter().enumerate() {
        // A line is under 200 bytes: stop while a whole one still fits.
        if lines.left < 200 {
            return writeln!(lines.w, "truncated {} more", conns.len() - n);
        }
        conn_line(&mut lines, n, &**c)?;
    }
    Ok(())
}

/// Writes `last_error`.
pub(super) fn last_error(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    ep.last_error(|e| match e {
        Some(e) => writeln!(w, "{}", e),
        None => writeln!(w, "none"),
    })
}

/// Writes `netns`: the inode number of the endpoint's network namespace.
pub(super) fn netns(ep: &Endpoint, w: &mut impl core::fmt::Write) -> core::fmt::Result {
    writeln!(w, "net:[{}]", ep.netns_inum())
}

/// The bytes `connections` may use before it says how many lines it left out
/// (a configfs attribute holds one page).
const CONNECTIONS_BUDGET: usize = 3900;

/// A writer that refuses to go past a byte budget.
struct LineBudget<'a, W: core::fmt::Write> {
    w: &'a mut W,
    left: usize,
}

impl<W: core::fmt::Write> core::fmt::Write for LineBudget<'_, W> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if s.len() > self.left {
            self.left = 0;
            return Err(core::fmt::Error);
        }
        self.left -= s.len();
        self.w.write_str(s)
    }
}

/// A connection's state as `connections` names it.
fn conn_state_name(st: ConnState) -> &'static str {
    match st {
        ConnState::Connecting => "connecting",
        ConnState::AddrResolved => "addr_resolved",
        ConnState::RouteResolved => "route_resolved",
        ConnState::Established => "established",
        ConnState::Failed(..) => "failed",
        ConnState::Disconnected => "disconnected",
        ConnState::DeviceRemoved => "device_removed",
        ConnState::Closing => "closing",
        ConnState::Closed => "closed",
    }
}

/// Writes the line of connection `n` (also debugfs's `connections`).
pub(crate) fn conn_line(
    w: &mut dyn core::fmt::Write,
    n: usize,
    conn: &dyn ConnView,
) -> core::fmt::Result {
    let c = conn.counters();
    let st = conn.state();
    write!(w, "conn{} state {}", n, conn_state_name(st))?;
    let mut buf = [0u8; 64];
    if let Some(peer) = conn.peer(&mut buf) {
        write!(w, " peer {}", peer)?;
    }
    if let Ok(q) = conn.qp_attrs() {
        write!(
            w,
            " qp_num {} qp_state {} timeout {} retry_cnt {} rnr_retry {} min_rnr_timer {}",
            q.qp_num,
            q.state_name(),
            q.timeout,
            q.retry_cnt,
            q.rnr_retry,
            q.min_rnr_timer
        )?;
    }
    write!(
        w,
        " messages {} bytes {} errors {}",
        c.messages, c.bytes, c.errors
    )?;
    match c.detect_us {
        Some(us) => writeln!(w, " detect_us {}", us),
        None => writeln!(w),
    }
}
