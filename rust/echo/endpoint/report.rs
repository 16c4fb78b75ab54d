// SPDX-License-Identifier: GPL-2.0

//! What an endpoint reports: `last_error`, the stats, what a QP got, and the
//! names of errnos.

use super::*;
use crate::rdma::verbs::QpAttrs;

impl Shared {
    /// The endpoint's name, for messages.
    pub(super) fn name(&self) -> &str {
        self.name.to_str().unwrap_or("?")
    }

    /// The endpoint's name, for tracepoints (`ConnHandler::endpoint_name`).
    pub(in crate::echo) fn c_name(&self) -> &CStr {
        &self.name
    }

    /// Records an error: counts it, makes it `last_error`, logs it unless the
    /// rate limit refuses (most errors are a peer's doing, and a peer may
    /// repeat them in a loop), in which case it counts it as suppressed.
    pub(in crate::echo) fn error(&self, msg: fmt::Arguments<'_>) {
        let mut g = self.inner.lock();
        g.stats.errors += 1;
        set_error(&mut g, msg);
        if crate::rdma::log_ratelimit() {
            pr_warn!("{}: {}\n", self.name(), msg);
        } else {
            g.stats.logs_suppressed += 1;
        }
    }

    /// Records a failed connection setup; `why` is what the peer's reject
    /// said, where the handler could read it.
    pub(in crate::echo) fn step_error(
        &self,
        who: fmt::Arguments<'_>,
        e: &StepError,
        why: Option<&dyn fmt::Display>,
    ) {
        self.stats(|s| {
            s.connect_failed += 1;
            if e.err == ECONNREFUSED {
                s.rejected += 1;
            }
        });
        match e.status {
            Some(st) if e.err == ECONNREFUSED => self.error(fmt!(
                "{}: {}: rejected by the peer: {} (reason {}){}{}",
                who,
                e.step,
                e.reject_msg.and_then(|m| m.to_str().ok()).unwrap_or("?"),
                st,
                if why.is_some() { ": " } else { "" },
                why.unwrap_or(&""),
            )),
            Some(st) if e.attempts > 1 => self.error(fmt!(
                "{}: {} (status {}) after {} attempts",
                who,
                e.step,
                st,
                e.attempts
            )),
            Some(st) => self.error(fmt!("{}: {} (status {})", who, e.step, st)),
            None => self.error(fmt!("{}: {}: {}", who, e.step, ErrName(e.err))),
        }
    }

    /// Sets `last_error` without counting an error.
    pub(in crate::echo) fn set_last_error(&self, msg: fmt::Arguments<'_>) {
        set_error(&mut self.inner.lock(), msg);
    }

    pub(in crate::echo) fn stats(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.inner.lock().stats);
    }

    /// Adds `bytes` and `pings` to the stats from a connection's fast path
    /// (`ConnHandler::fast_completion`), which must not take `inner`.
    pub(in crate::echo) fn fast_stats(&self, bytes: u64, pings: u64) {
        self.fast_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.fast_pings.fetch_add(pings, Ordering::Relaxed);
    }

    /// Updates the stats with `f`, then records a round-trip time
    /// ([`Shared::record_rtt`]).
    pub(in crate::echo) fn stats_rtt(
        &self,
        conn: u32,
        size: u32,
        rtt: Option<Delta>,
        f: impl FnOnce(&mut Stats),
    ) {
        f(&mut self.inner.lock().stats);
        if let Some(d) = rtt {
            self.record_rtt(conn, size, d);
        }
    }

    /// Records a round trip of `d`, of a `size`-byte message on connection
    /// `conn`, and sends it to its tracepoint. Takes no sleeping lock: a
    /// fast path (`ConnHandler::fast_completion`) may call it.
    pub(in crate::echo) fn record_rtt(&self, conn: u32, size: u32, d: Delta) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(0);
        self.rtt.lock().record(ns);
        crate::rdma::trace::echo_rtt(self.c_name(), conn, size, ns);
    }

    /// Counts a failed completion with `status` on connection `conn`, and, in
    /// the same critical section, the detection of the peer's failure it is,
    /// `detect_us` after the last good completion, where it is one. The
    /// detection also goes to its tracepoint, with the ack timeout and retry
    /// count the connection's QP read back (`qp`; 0 where it could not be).
    pub(in crate::echo) fn wc_failed(
        &self,
        conn: u32,
        status: u32,
        detect_us: Option<u64>,
        qp: Option<QpAttrs>,
    ) {
        {
            let mut g = self.inner.lock();
            g.stats.wc_error(status);
            if let Some(us) = detect_us {
                g.stats.record_detection(us);
            }
        }
        if let Some(us) = detect_us {
            crate::rdma::trace::detect(
                self.c_name(),
                conn,
                qp.map_or(0, |q| q.timeout),
                qp.map_or(0, |q| q.retry_cnt),
                us,
                status,
            );
        }
    }

    /// Captures what the QP of a just-established connection got, and
    /// returns its attributes: what the connection's completion handler
    /// keeps, rather than ask the provider again from there.
    pub(in crate::echo) fn read_back<H: crate::rdma::ConnHandler>(
        &self,
        conn: &Conn<H>,
    ) -> Option<QpAttrs> {
        let rb = ReadBack::of(conn)?;
        self.inner.lock().read_back = Some(rb);
        Some(rb.qp)
    }

    /// Records a connect request a server refused for its own reasons (`why`),
    /// before admission: counted in `rejected`, named in `last_error`.
    pub(in crate::echo) fn refused(&self, why: fmt::Arguments<'_>) {
        let mut g = self.inner.lock();
        g.stats.rejected += 1;
        set_error(&mut g, fmt!("server: rejected a connect request: {}", why));
    }
}

/// Records `msg` as the endpoint's `last_error`, under its lock `g`.
pub(super) fn set_error(g: &mut Inner, msg: fmt::Arguments<'_>) {
    // Allocates nothing: an error for want of memory is named too.
    g.last_error.set(msg);
}

/// An errno, printed by its name where cmecho knows it.
pub(crate) struct ErrName(pub(crate) Error);

impl fmt::Display for ErrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.name() {
            Some(n) => write!(f, "{}", n.to_str().unwrap_or("?")),
            None => write!(f, "errno {}", self.0.to_errno()),
        }
    }
}
