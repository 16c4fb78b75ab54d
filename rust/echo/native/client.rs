// SPDX-License-Identifier: GPL-2.0

//! The native echo client side: up to `depth` messages of `size` bytes in
//! flight, each echo checked against the oldest sequence number in flight
//! ([`verify_at`]), everything in completion handlers.
//!
//! An echo the client waits for with none of its SENDs in flight is watched
//! ([`crate::echo::watch`]): probes detect a peer that dies, and an echo that
//! has not come `echo_timeout_ms` after its message's acknowledgement fails
//! the connection.

use super::{fill_at, verify_at, MAX_DEPTH};
use crate::echo::hello::{Hello, Refused};
use crate::echo::watch::{self, Watch};
use crate::echo::{spawn_connect, Addr, Config, ConnCounters, EchoConn, ErrName, Shared};
use crate::rdma::params::PrivateData;
use crate::rdma::verbs::{QpAttrs, QpConfig};
use crate::rdma::WcError;
use crate::rdma::{Conn, ConnHandler, EndReason};
use kernel::error::code::ENOTCONN;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::time::{Delta, Instant, Monotonic};

/// Progress of an echo-mode client connection.
struct ClientState {
    /// Sequence number of the next message to send.
    next: u64,
    /// Sequence number of the next echo expected.
    expected: u64,
    inflight: u32,
    /// Send slots whose SEND has not completed yet.
    busy: [u64; (MAX_DEPTH / 64) as usize],
    /// When each send slot's SEND was posted, one per slot (`depth`). On the
    /// heap: two arrays of `MAX_DEPTH` would make this state 8 KiB, built on
    /// the stack of the configfs write that enables the endpoint (a frame of
    /// 12 KiB in [`start`], of a 16 KiB kernel stack).
    sent_at: KVec<Option<Instant<Monotonic>>>,
    /// When each send slot's SEND completed: the peer's device has the
    /// message, and its echo is due. One per slot, as `sent_at`.
    acked_at: KVec<Option<Instant<Monotonic>>>,
    started: Option<Instant<Monotonic>>,
    /// What the QP got, read once established: what a failed completion
    /// reports, without asking the provider from its handler.
    qp: Option<QpAttrs>,
    watch: Watch,
    done: bool,
    counters: ConnCounters,
    verify_errors: u64,
}

/// One connection of an echo-mode client: send slot `k` is buffer and tag `k`,
/// receive slot `k` is buffer and tag `depth + k`.
#[pin_data]
pub(super) struct ClientConn {
    shared: Arc<Shared>,
    index: u32,
    size: u32,
    depth: u32,
    count: u64,
    duration: Option<Delta>,
    echo_timeout_ms: u32,
    #[pin]
    st: Mutex<ClientState>,
}

/// Starts client connection `index` of an endpoint in echo mode.
pub(super) fn start(shared: &Arc<Shared>, cfg: &Config, addr: &Addr, index: u32) -> Result {
    let depth = cfg.depth;
    let sent_at = KVec::from_elem(None, depth as usize, GFP_KERNEL)?;
    let acked_at = KVec::from_elem(None, depth as usize, GFP_KERNEL)?;
    let handler = try_pin_init!(ClientConn {
        shared: shared.clone(),
        index,
        size: cfg.size,
        depth,
        count: cfg.count,
        duration: cfg.duration_ms.map(|ms| Delta::from_millis(i64::from(ms))),
        echo_timeout_ms: cfg.echo_timeout_ms,
        st <- new_mutex!(ClientState {
            next: 0,
            expected: 0,
            inflight: 0,
            busy: [0; (MAX_DEPTH / 64) as usize],
            sent_at,
            acked_at,
            started: None,
            qp: None,
            watch: Watch::new(),
            done: false,
            counters: ConnCounters::default(),
            verify_errors: 0,
        }, "cmecho_native_cli_st"),
    });
    // Tag `2 × depth` is the probe's, which has no buffer.
    let qp = QpConfig {
        ntags: 2 * depth + 1,
        nbufs: 2 * depth,
        max_send_wr: depth + 1,
        max_recv_wr: depth,
    };
    spawn_connect(shared, cfg, addr, index, handler, qp)
}

impl ClientState {
    /// How long the transport has been waiting for an acknowledgement: since the
    /// post of the oldest SEND (or probe) not completed yet, or since the last
    /// SEND or probe completion if that came later.
    fn waited(&self) -> Option<Delta> {
        let sends = (0..MAX_DEPTH)
            .filter(|&k| self.is_busy(k))
            .filter_map(|k| self.sent_at.get(k as usize).copied().flatten());
        let oldest = Iterator::chain(sends, self.watch.probe_posted())
            .map(|t| t.elapsed())
            .max();
        let progress = self.watch.last_ok().map(|t| t.elapsed());
        match (oldest, progress) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether no SEND is in flight.
    fn sends_idle(&self) -> bool {
        self.busy.iter().all(|w| *w == 0)
    }

    fn is_busy(&self, k: u32) -> bool {
        self.busy
            .get((k / 64) as usize)
            .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    fn set_busy(&mut self, k: u32, on: bool) {
        let bit = 1u64 << (k % 64);
        if let Some(w) = self.busy.get_mut((k / 64) as usize) {
            if on {
                *w |= bit;
            } else {
                *w &= !bit;
            }
        }
    }
}

impl ClientConn {
    /// What this client asks the server for.
    fn hello(&self) -> Hello {
        Hello {
            size: self.size,
            depth: self.depth,
        }
    }

    /// The probe's tag: after the send and receive slots.
    fn probe_tag(&self) -> u32 {
        2 * self.depth
    }

    /// The send slot of message `seq`.
    fn slot(&self, seq: u64) -> u32 {
        // `depth` is 1..=MAX_DEPTH (configfs checks it); no division by zero.
        seq.checked_rem(u64::from(self.depth)).unwrap_or(0) as u32
    }

    /// Whether no new message may be sent any more.
    fn stopped(&self, st: &ClientState) -> bool {
        match self.duration {
            Some(d) => st.started.is_some_and(|t| t.elapsed() >= d),
            None => st.next >= self.count,
        }
    }

    /// Sends as many messages as the depth, the free send slots and the count or
    /// duration allow; finishes the connection when nothing is left in flight.
    fn pump(&self, conn: &Conn<Self>) {
        let mut st = self.st.lock();
        if st.done {
            return;
        }
        while st.inflight < self.depth && !self.stopped(&st) {
            let k = self.slot(st.next);
            if st.is_busy(k) {
                break;
            }
            let seq = st.next;
            let posted = conn.with_res(|res| {
                let total = self.size as usize;
                res.produce_buf(k, self.size, |at, c| fill_at(c, at, total, seq))?;
                res.post_send(k, k, 0, self.size)
            });
            if let Err(e) = posted {
                drop(st);
                self.fail(conn, fmt!("cannot post a SEND: {}", ErrName(e)));
                return;
            }
            st.set_busy(k, true);
            if let Some(t) = st.sent_at.get_mut(k as usize) {
                *t = Some(Instant::now());
            }
            st.next += 1;
            st.inflight += 1;
        }
        if st.inflight == 0 && self.stopped(&st) {
            st.done = true;
            let ok = st.verify_errors == 0;
            let elapsed = st.started.map(|t| t.elapsed());
            drop(st);
            if let Some(d) = elapsed {
                self.shared.stats(|s| s.run_time(d));
            }
            self.shared.client_finished(ok);
            // The close disconnects, from its work item: nothing here waits
            // for the CM.
            conn.close();
        }
    }

    fn on_echo(&self, conn: &Conn<Self>, tag: u32, len: u32) {
        let r = tag - self.depth;
        let (seq, sent) = {
            let mut st = self.st.lock();
            if st.done {
                // The run is over and the connection closing: a late message is
                // neither an echo nor counted.
                return;
            }
            if st.inflight == 0 {
                drop(st);
                self.fail(
                    conn,
                    fmt!("protocol violation: a message of {} bytes arrived with no echo outstanding", len),
                );
                return;
            }
            let k = self.slot(st.expected);
            // The echo is here: its deadline no longer runs, while it is
            // checked below ([`ClientConn::watch`]).
            if let Some(t) = st.acked_at.get_mut(k as usize) {
                *t = None;
            }
            (st.expected, st.sent_at.get(k as usize).copied().flatten())
        };
        let good = if len != self.size {
            false
        } else {
            let total = len as usize;
            match conn.with_res(|res| {
                res.scan_buf(self.depth + r, len, |at, c| verify_at(c, at, total, seq))
            }) {
                Ok(same) => same,
                // Closed meanwhile (a stop destroyed the QP and took its buffers): the
                // echo can be neither verified nor counted; it is not a verify error.
                Err(e) if e == ENOTCONN || !conn.is_open() => return,
                Err(_) => false,
            }
        };
        let now = Instant::now();
        let rtt = sent.map(|t| now - t);
        {
            let mut st = self.st.lock();
            st.expected += 1;
            // Checked above; only this connection's completions change it.
            st.inflight = st.inflight.saturating_sub(1);
            st.counters.messages += 1;
            st.counters.bytes += u64::from(len);
            if !good {
                st.verify_errors += 1;
                st.counters.errors += 1;
            }
        }
        self.shared.stats_rtt(conn.serial(), len, rtt, |s| {
            s.pings += 1;
            s.bytes += u64::from(len);
            if !good {
                s.verify_errors += 1;
                s.errors += 1;
            }
        });
        if !good {
            self.shared.set_last_error(fmt!(
                "client {}: verify error: echo of message {} ({} bytes, {} expected) differs",
                self.index,
                seq,
                len,
                self.size
            ));
        }
        if conn
            .with_res(|res| res.post_recv(self.depth + r, self.depth + r, 0, self.size))
            .is_err()
        {
            self.fail(conn, fmt!("cannot repost a receive"));
            return;
        }
        self.pump(conn);
    }

    fn fail(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        if !conn.is_open() {
            // Torn down meanwhile: `ended` or the closer reports it.
            return;
        }
        self.abort(conn, what);
    }

    /// Finishes the connection as failed, whatever its state.
    fn abort(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        {
            let mut st = self.st.lock();
            if st.done {
                return;
            }
            st.done = true;
            st.counters.errors += 1;
        }
        self.shared.error(fmt!("client {}: {}", self.index, what));
        self.shared.client_finished(false);
        conn.close();
    }
}

impl EchoConn for ClientConn {
    fn setup_failed(&self) {
        let first = {
            let mut st = self.st.lock();
            !core::mem::replace(&mut st.done, true)
        };
        if first {
            self.shared.client_finished(false);
        }
    }

    fn counters(&self) -> ConnCounters {
        self.st.lock().counters
    }

    fn explain_reject(&self, data: &PrivateData) -> Option<Refused> {
        Refused::read(data.as_bytes(), self.hello())
    }

    fn tick(&self, conn: &Conn<Self>) -> Option<u32> {
        self.watch(conn)
    }

    /// The first batch: up to `depth` messages written and posted here, in
    /// process context once the endpoint's clients are all connected or
    /// failed, not in the `ESTABLISHED` handler.
    fn connected(&self, conn: &Conn<Self>) {
        if self.st.lock().done {
            // Ended (and reported) between `ESTABLISHED` and now: its QP, if
            // still there, is not the one to show.
            return;
        }
        let qp = self.shared.read_back(conn);
        {
            let mut st = self.st.lock();
            st.qp = qp;
            st.watch.start(qp);
            st.started = Some(Instant::now());
        }
        self.pump(conn);
    }
}

impl ClientConn {
    /// The watch ([`EchoConn::tick`]): fails the connection when the oldest
    /// echo it waits for has not come `echo_timeout_ms` after its message was
    /// acknowledged, and posts a probe when one is due ([`Watch`]).
    fn watch(&self, conn: &Conn<Self>) -> Option<u32> {
        let mut st = self.st.lock();
        if st.done {
            return None;
        }
        let again = st.watch.again_ms();
        if st.started.is_none() || st.inflight == 0 {
            return Some(again);
        }
        let seq = st.expected;
        let k = self.slot(seq);
        let limit = Delta::from_millis(i64::from(self.echo_timeout_ms));
        let late = !st.is_busy(k)
            && st
                .acked_at
                .get(k as usize)
                .copied()
                .flatten()
                .is_some_and(|t| t.elapsed() >= limit);
        if late {
            drop(st);
            self.fail(
                conn,
                fmt!(
                    "no echo of message {} within echo_timeout_ms {} of its acknowledgement",
                    seq,
                    self.echo_timeout_ms
                ),
            );
            return None;
        }
        let idle = st.sends_idle();
        let checked = st.watch.check(conn, self.probe_tag(), idle);
        drop(st);
        watch::verdict(checked, again, |why| self.fail(conn, why))
    }
}

impl ConnHandler for ClientConn {
    fn connect_data(&self) -> PrivateData {
        // 16 bytes: always fits.
        PrivateData::new(&self.hello().encode()).unwrap_or_default()
    }

    fn setup(&self, conn: &Conn<Self>) -> Result {
        conn.with_res(|res| {
            for k in 0..self.depth {
                res.alloc_buf(k, self.size, false)?;
                res.alloc_buf(self.depth + k, self.size, false)?;
                res.post_recv(self.depth + k, self.depth + k, 0, self.size)?;
            }
            Ok(())
        })
    }

    fn endpoint_name(&self) -> &CStr {
        self.shared.c_name()
    }

    fn established(&self, _conn: &Conn<Self>) {
        self.shared.client_established();
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        match status {
            Err(e) if e.is_flush() && !conn.flush_is_failure() => {}
            Err(e) => {
                // With what this connection's QP got, for the detection's event.
                let (detect, qp) = {
                    let mut st = self.st.lock();
                    let first = !st.done && conn.is_open();
                    let us = st.waited().map(crate::rdma::micros);
                    if first && st.counters.detect_us.is_none() {
                        st.counters.detect_us = us;
                    }
                    (us.filter(|_| first), st.qp)
                };
                self.shared.wc_failed(conn.serial(), e.0, detect, qp);
                let op = if tag < self.depth {
                    "SEND"
                } else if tag == self.probe_tag() {
                    "probe"
                } else {
                    "RECV"
                };
                self.fail(conn, fmt!("{} failed: {}", op, e));
            }
            Ok(_) if tag < self.depth => {
                {
                    let mut st = self.st.lock();
                    st.set_busy(tag, false);
                    st.watch.acked();
                    if let Some(t) = st.acked_at.get_mut(tag as usize) {
                        *t = Some(Instant::now());
                    }
                }
                self.pump(conn);
            }
            Ok(_) if tag == self.probe_tag() => self.st.lock().watch.probe_acked(),
            Ok(len) => self.on_echo(conn, tag, len),
        }
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        let why = match reason {
            EndReason::Disconnected => "the peer disconnected",
            EndReason::DeviceRemoval => "the RDMA device was removed",
        };
        let n = self.st.lock().counters.messages;
        self.abort(conn, fmt!("{} after {} messages", why, n));
        conn.close();
    }
}
