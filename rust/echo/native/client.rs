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
use crate::rdma::{Conn, ConnHandler, EndReason, Fast, FastDone, Post};
use kernel::prelude::*;
use kernel::sync::{new_mutex, new_spinlock_irq, Arc, Mutex, SpinLockIrq};
use kernel::time::{Delta, Instant, Monotonic};

/// Progress of an echo-mode client connection. Its messages' progress
/// (`next`, `expected`, `inflight`, `busy`, `sent_at`, `acked_at`) changes
/// only on the thread holding the connection's QP resources, in
/// [`Conn::with_res`] or a fast path ([`ConnHandler::fast_completion`]), so
/// a step that posts reads it, copies, writes it back and then posts, with
/// no lock held across the copy or the post; the lock is for those who only
/// read it (the watch, the counters) and for `done`.
struct ClientHot {
    /// Sequence number of the next message to send.
    next: u64,
    /// Sequence number of the next echo expected.
    expected: u64,
    inflight: u32,
    /// Send slots whose SEND has not completed yet.
    busy: [u64; (MAX_DEPTH / 64) as usize],
    /// When each send slot's SEND was posted (stamped just before the post),
    /// one per slot (`depth`). On the heap: two arrays of `MAX_DEPTH` would
    /// make this state 8 KiB, built on the stack of the configfs write that
    /// enables the endpoint (a frame of 12 KiB in [`start`], of a 16 KiB
    /// kernel stack).
    sent_at: KVec<Option<Instant<Monotonic>>>,
    /// When each send slot's SEND completed: the peer's device has the
    /// message, and its echo is due. One per slot, as `sent_at`.
    acked_at: KVec<Option<Instant<Monotonic>>>,
    /// When the last SEND completed: an acknowledgement, for the watch.
    last_ok: Option<Instant<Monotonic>>,
    started: Option<Instant<Monotonic>>,
    done: bool,
    /// Why a fast path could not post a SEND after it had taken an echo
    /// (too late to hand the completion to process context): the watch
    /// fails the connection with it at its next tick.
    stalled: Option<Error>,
    counters: ConnCounters,
    verify_errors: u64,
}

/// What an echo-mode client connection keeps in process context only.
struct ClientSlow {
    /// What the QP got, read once established: what a failed completion
    /// reports, without asking the provider from its handler.
    qp: Option<QpAttrs>,
    watch: Watch,
}

/// One connection of an echo-mode client: send slot `k` is buffer and tag `k`,
/// receive slot `k` is buffer and tag `depth + k`.
///
/// Lock order: `slow`, then the QP resources ([`Conn::with_res`], or held
/// by a fast path), then `hot` (interrupts off), which nests nothing.
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
    hot: SpinLockIrq<ClientHot>,
    #[pin]
    slow: Mutex<ClientSlow>,
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
        hot <- new_spinlock_irq!(ClientHot {
            next: 0,
            expected: 0,
            inflight: 0,
            busy: [0; (MAX_DEPTH / 64) as usize],
            sent_at,
            acked_at,
            last_ok: None,
            started: None,
            done: false,
            stalled: None,
            counters: ConnCounters::default(),
            verify_errors: 0,
        }, "cmecho_native_cli_hot"),
        slow <- new_mutex!(ClientSlow {
            qp: None,
            watch: Watch::new(),
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

impl ClientHot {
    /// How long the transport has been waiting for an acknowledgement: since the
    /// post of the oldest SEND (or probe) not completed yet, or since the last
    /// SEND or probe completion if that came later.
    fn waited(&self, watch: &Watch) -> Option<Delta> {
        let sends = (0..MAX_DEPTH)
            .filter(|&k| self.is_busy(k))
            .filter_map(|k| self.sent_at.get(k as usize).copied().flatten());
        let oldest = Iterator::chain(sends, watch.probe_posted())
            .map(|t| t.elapsed())
            .max();
        let last_ok = match (watch.last_ok(), self.last_ok) {
            (Some(a), Some(b)) => Some(if (b - a).as_nanos() > 0 { b } else { a }),
            (a, b) => a.or(b),
        };
        let progress = last_ok.map(|t| t.elapsed());
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

    /// Send slot `k`'s SEND completed.
    fn sent(&mut self, k: u32) {
        self.set_busy(k, false);
        let now = Instant::now();
        self.last_ok = Some(now);
        if let Some(t) = self.acked_at.get_mut(k as usize) {
            *t = Some(now);
        }
    }
}

/// What became of a message that arrived, in process context.
enum Arrived {
    /// The run is over and the connection closing: a late message is neither
    /// an echo nor counted.
    Late,
    /// No echo was outstanding.
    Unsolicited,
    /// The echo of message `seq`, checked and counted.
    Echo {
        seq: u64,
        good: bool,
        rtt: Option<Delta>,
        /// Whether its receive was posted again, and the next messages
        /// then sent.
        next: Result<(), Step>,
    },
}

/// A step of the client that could not post.
#[derive(Clone, Copy)]
enum Step {
    Repost,
    Send(Error),
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
    fn stopped(&self, h: &ClientHot) -> bool {
        match self.duration {
            Some(d) => h.started.is_some_and(|t| t.elapsed() >= d),
            None => h.next >= self.count,
        }
    }

    /// Sends as many messages as the depth and the free send slots allow,
    /// unless `stopped` (decided once by the caller, so that a fast path
    /// knows before it starts whether this ends the run). With the
    /// resources held. Each message's send time is stamped before its post:
    /// the provider may complete the whole exchange within the post.
    fn send_more<P: Post>(&self, io: &P, stopped: bool) -> Result {
        if stopped {
            return Ok(());
        }
        loop {
            let (seq, k) = {
                let h = self.hot.lock();
                let k = self.slot(h.next);
                if h.done || h.inflight >= self.depth || h.is_busy(k) {
                    return Ok(());
                }
                (h.next, k)
            };
            let total = self.size as usize;
            io.produce_buf(k, self.size, |at, c| fill_at(c, at, total, seq))?;
            {
                let mut h = self.hot.lock();
                h.set_busy(k, true);
                if let Some(t) = h.sent_at.get_mut(k as usize) {
                    *t = Some(Instant::now());
                }
                h.next += 1;
                h.inflight += 1;
            }
            io.post_send(k, k, 0, self.size)?;
        }
    }

    /// Process context's [`ClientConn::send_more`].
    fn pump(&self, conn: &Conn<Self>) {
        let stopped = self.stopped(&self.hot.lock());
        self.sent_more(conn, conn.with_res(|io| self.send_more(io, stopped)));
    }

    /// What process context does once it sent what it could: fails the
    /// connection if a SEND could not be posted, else finishes it if that
    /// was all.
    fn sent_more(&self, conn: &Conn<Self>, sent: Result) {
        match sent {
            Ok(()) => self.finish_if_over(conn),
            Err(e) => self.fail(conn, fmt!("cannot post a SEND: {}", ErrName(e))),
        }
    }

    /// Finishes the connection once nothing is in flight and nothing is
    /// left to send. Process context.
    fn finish_if_over(&self, conn: &Conn<Self>) {
        let (ok, elapsed) = {
            let mut h = self.hot.lock();
            if h.done || h.inflight != 0 || !self.stopped(&h) {
                return;
            }
            h.done = true;
            (h.verify_errors == 0, h.started.map(|t| t.elapsed()))
        };
        if let Some(d) = elapsed {
            self.shared.stats(|s| s.run_time(d));
        }
        self.shared.client_finished(ok);
        // The close disconnects, from its work item: nothing here waits for
        // the CM.
        conn.close();
    }

    /// Whether receive slot `r` holds message `seq`, `len` bytes long.
    fn verify<P: Post>(&self, io: &P, r: u32, len: u32, seq: u64) -> bool {
        let total = len as usize;
        len == self.size
            && io
                .scan_buf(self.depth + r, len, |at, c| verify_at(c, at, total, seq))
                .unwrap_or(false)
    }

    /// Counts the echo of the oldest message in flight (send slot `k`).
    fn took_echo(&self, k: u32, len: u32, good: bool) {
        let mut h = self.hot.lock();
        if let Some(t) = h.acked_at.get_mut(k as usize) {
            *t = None;
        }
        h.expected += 1;
        // Checked by the caller; only this connection's completions change it.
        h.inflight = h.inflight.saturating_sub(1);
        h.counters.messages += 1;
        h.counters.bytes += u64::from(len);
        if !good {
            h.verify_errors += 1;
            h.counters.errors += 1;
        }
    }

    /// A message arrived in receive slot `r`, in process context: the
    /// oldest message's echo, checked, counted, its receive posted again,
    /// and what that frees sent.
    fn arrived<P: Post>(&self, io: &P, r: u32, len: u32) -> Arrived {
        let (seq, k, sent, stopped) = {
            let mut h = self.hot.lock();
            if h.done {
                return Arrived::Late;
            }
            if h.inflight == 0 {
                return Arrived::Unsolicited;
            }
            let k = self.slot(h.expected);
            // The echo is here: its deadline no longer runs while it is
            // checked ([`ClientConn::watch`]).
            if let Some(t) = h.acked_at.get_mut(k as usize) {
                *t = None;
            }
            let sent = h.sent_at.get(k as usize).copied().flatten();
            (h.expected, k, sent, self.stopped(&h))
        };
        let good = self.verify(io, r, len, seq);
        let rtt = sent.map(|t| t.elapsed());
        self.took_echo(k, len, good);
        let next = match io.post_recv(self.depth + r, self.depth + r, 0, self.size) {
            Ok(()) => self.send_more(io, stopped).map_err(Step::Send),
            Err(_) => Err(Step::Repost),
        };
        Arrived::Echo {
            seq,
            good,
            rtt,
            next,
        }
    }

    fn on_echo(&self, conn: &Conn<Self>, tag: u32, len: u32) {
        let r = tag - self.depth;
        let (seq, good, rtt, next) = match conn.with_res(|io| Ok(self.arrived(io, r, len))) {
            // Closed meanwhile (a stop destroyed the QP and took its
            // buffers): the echo can be neither verified nor counted.
            Err(_) | Ok(Arrived::Late) => return,
            Ok(Arrived::Unsolicited) => {
                self.fail(
                    conn,
                    fmt!("protocol violation: a message of {} bytes arrived with no echo outstanding", len),
                );
                return;
            }
            Ok(Arrived::Echo {
                seq,
                good,
                rtt,
                next,
            }) => (seq, good, rtt, next),
        };
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
        match next {
            Ok(()) => self.finish_if_over(conn),
            Err(Step::Repost) => self.fail(conn, fmt!("cannot repost a receive")),
            Err(Step::Send(e)) => self.sent_more(conn, Err(e)),
        }
    }

    /// Send slot `tag`'s SEND completed, in process context.
    fn on_sent(&self, conn: &Conn<Self>, tag: u32) {
        let sent = conn.with_res(|io| {
            let stopped = {
                let mut h = self.hot.lock();
                h.sent(tag);
                self.stopped(&h)
            };
            self.send_more(io, stopped)
        });
        self.sent_more(conn, sent);
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
            let mut h = self.hot.lock();
            if h.done {
                return;
            }
            h.done = true;
            h.counters.errors += 1;
        }
        self.shared.error(fmt!("client {}: {}", self.index, what));
        self.shared.client_finished(false);
        conn.close();
    }
}

impl EchoConn for ClientConn {
    fn setup_failed(&self) {
        let first = !core::mem::replace(&mut self.hot.lock().done, true);
        if first {
            self.shared.client_finished(false);
        }
    }

    fn counters(&self) -> ConnCounters {
        self.hot.lock().counters
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
        if self.hot.lock().done {
            // Ended (and reported) between `ESTABLISHED` and now: its QP, if
            // still there, is not the one to show.
            return;
        }
        let qp = self.shared.read_back(conn);
        {
            let mut sl = self.slow.lock();
            sl.qp = qp;
            sl.watch.start(qp);
        }
        self.hot.lock().started = Some(Instant::now());
        self.pump(conn);
    }
}

impl ClientConn {
    /// The watch ([`EchoConn::tick`]): fails the connection when the oldest
    /// echo it waits for has not come `echo_timeout_ms` after its message was
    /// acknowledged, or a fast path could not post, and posts a probe when
    /// one is due ([`Watch`]).
    fn watch(&self, conn: &Conn<Self>) -> Option<u32> {
        let mut sl = self.slow.lock();
        let (late, stalled, idle, inflight, last_ok) = {
            let mut h = self.hot.lock();
            if h.done {
                return None;
            }
            if h.started.is_none() {
                return Some(sl.watch.again_ms());
            }
            let seq = h.expected;
            let k = self.slot(seq);
            let limit = Delta::from_millis(i64::from(self.echo_timeout_ms));
            let late = h.inflight != 0
                && !h.is_busy(k)
                && h.acked_at
                    .get(k as usize)
                    .copied()
                    .flatten()
                    .is_some_and(|t| t.elapsed() >= limit);
            (
                late.then_some(seq),
                h.stalled.take(),
                h.sends_idle(),
                h.inflight,
                h.last_ok,
            )
        };
        if let Some(t) = last_ok {
            sl.watch.acked_at(t);
        }
        let again = sl.watch.again_ms();
        if let Some(e) = stalled {
            drop(sl);
            self.fail(conn, fmt!("cannot post a SEND: {}", ErrName(e)));
            return None;
        }
        if let Some(seq) = late {
            drop(sl);
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
        if inflight == 0 {
            return Some(again);
        }
        let checked = sl.watch.check(conn, self.probe_tag(), idle);
        drop(sl);
        watch::verdict(checked, again, |why| self.fail(conn, why))
    }

    /// A fast path's echo in receive slot `r` ([`ConnHandler::fast_completion`]).
    /// Defers, having done nothing, what process context reports or ends:
    /// the last echo of the run, a message with no echo outstanding, one of
    /// the wrong length or content, and a receive that cannot be posted
    /// again. Unlike process context, it cannot stop the echo's deadline
    /// before the check (it may still defer): an echo verified just as its
    /// `echo_timeout_ms` runs out may be called late.
    fn fast_echo(&self, fast: &Fast<'_, Self>, r: u32, len: u32) -> FastDone {
        let (seq, k, sent, stopped) = {
            let h = self.hot.lock();
            let stopped = self.stopped(&h);
            if h.done || h.inflight == 0 || (h.inflight == 1 && stopped) {
                return FastDone::Defer;
            }
            let k = self.slot(h.expected);
            let sent = h.sent_at.get(k as usize).copied().flatten();
            (h.expected, k, sent, stopped)
        };
        if !self.verify(fast, r, len, seq)
            || fast
                .post_recv(self.depth + r, self.depth + r, 0, self.size)
                .is_err()
        {
            return FastDone::Defer;
        }
        // Counted before the echo is taken: once it is, process context (the
        // first batch's `finish_if_over`) may end a timed run, and what it
        // reports must include this echo.
        if let Some(t) = sent {
            self.shared.record_rtt(fast.serial(), len, t.elapsed());
        }
        self.shared.fast_stats(u64::from(len), 1);
        self.took_echo(k, len, true);
        self.sent_more_fast(fast, stopped);
        FastDone::Done
    }

    /// A fast path's SEND completion of send slot `k`. Defers one that
    /// could end the run; ignores one after it ended.
    fn fast_sent(&self, fast: &Fast<'_, Self>, k: u32) -> FastDone {
        let stopped = {
            let mut h = self.hot.lock();
            if h.done {
                return FastDone::Done;
            }
            let stopped = self.stopped(&h);
            if h.inflight == 0 && stopped {
                return FastDone::Defer;
            }
            h.sent(k);
            stopped
        };
        self.sent_more_fast(fast, stopped);
        FastDone::Done
    }

    /// [`ClientConn::send_more`] from a fast path, which can no longer
    /// defer: a SEND it cannot post is left to the watch.
    fn sent_more_fast(&self, fast: &Fast<'_, Self>, stopped: bool) {
        if let Err(e) = self.send_more(fast, stopped) {
            self.hot.lock().stalled = Some(e);
        }
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
                // Asked before the locks: it takes the connection's mutex.
                let open = conn.is_open();
                let (detect, qp) = {
                    let sl = self.slow.lock();
                    let mut h = self.hot.lock();
                    let first = !h.done && open;
                    let us = h.waited(&sl.watch).map(crate::rdma::micros);
                    if first && h.counters.detect_us.is_none() {
                        h.counters.detect_us = us;
                    }
                    (us.filter(|_| first), sl.qp)
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
            Ok(_) if tag < self.depth => self.on_sent(conn, tag),
            Ok(_) if tag == self.probe_tag() => self.slow.lock().watch.probe_acked(),
            Ok(len) => self.on_echo(conn, tag, len),
        }
    }

    /// The steady state of a run, in the CQ's softirq: a SEND completed, or
    /// an echo arrived and checked out, and what that frees is sent. A
    /// probe's completion, which takes the watch's lock, is deferred.
    fn fast_completion(&self, fast: &Fast<'_, Self>, tag: u32, len: u32) -> FastDone {
        if tag < self.depth {
            self.fast_sent(fast, tag)
        } else if tag < self.probe_tag() {
            self.fast_echo(fast, tag - self.depth, len)
        } else {
            FastDone::Defer
        }
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        let why = match reason {
            EndReason::Disconnected => "the peer disconnected",
            EndReason::DeviceRemoval => "the RDMA device was removed",
        };
        let n = self.hot.lock().counters.messages;
        self.abort(conn, fmt!("{} after {} messages", why, n));
        conn.close();
    }
}
