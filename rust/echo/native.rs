// SPDX-License-Identifier: GPL-2.0

//! Native echo mode: SEND/RECV echo with up to `depth` messages in flight.
//!
//! The client SENDs messages of `size` bytes whose content is a function of their
//! sequence number ([`fill_at`]); the server SENDs each message back from the buffer
//! it arrived in. RC delivers in order, so the client checks every echo against
//! the oldest sequence number it has in flight ([`verify_at`]): a wrong length, a
//! wrong sequence number or changed content is a verify error, counted and
//! reported in `last_error`, never ignored. Everything runs in completion
//! handlers: no thread per connection.
//!
//! The server's `depth` and `size` are the most it accepts: it keeps `2 × depth`
//! receives of `size` bytes posted per connection (half may be busy echoing).
//! The client states its own in its connect request, and a server that accepts
//! less rejects it with its limits, which the client shows ([`super::hello`]).

use super::hello::{Hello, Refused};
use super::{Addr, Config, ConnCounters, EchoConn, ErrName, Shared};
use crate::rdma::params::{Ece, PrivateData};
use crate::rdma::verbs::QpConfig;
use crate::rdma::WcError;
use crate::rdma::{
    Conn, ConnHandler, ConnectRequest, EndReason, ListenHandler, Reject, RejectReason, StepError,
};
use kernel::error::code::ENOTCONN;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::time::{Delta, Instant, Monotonic};

/// The most messages in flight per connection.
pub(crate) const MAX_DEPTH: u32 = 256;

/// Writes bytes `at..at + out.len()` of message `seq` of `total` bytes into `out`:
/// the message is its sequence number (little-endian, as much of it as fits)
/// followed by 8-byte words derived from it and their index ([`pattern`]), so a
/// chunk costs a multiplication per word, not per byte. A message shorter than
/// 8 bytes folds the rest of the sequence number into its last byte.
pub(crate) fn fill_at(out: &mut [u8], at: usize, total: usize, seq: u64) {
    let mut i = at;
    let mut rest = &mut *out;
    while !rest.is_empty() {
        let (w, o) = (i / 8, i % 8);
        let word = if w == 0 {
            seq.to_le_bytes()
        } else {
            pattern(seq, w).to_le_bytes()
        };
        let n = (8 - o).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&word[o..o + n]);
        i += n;
        rest = tail;
    }
    // A message shorter than the sequence number still depends on all of it:
    // its last byte also carries the bytes that did not fit.
    if total < 8 && total > at && total <= at + out.len() {
        let folded = seq.to_le_bytes()[total..].iter().fold(0u8, |a, b| a ^ b);
        out[total - 1 - at] ^= folded.rotate_left(1) ^ 0x5a;
    }
}

/// Whether `part` is bytes `at..at + part.len()` of message `seq` of `total` bytes.
pub(crate) fn verify_at(part: &[u8], at: usize, total: usize, seq: u64) -> bool {
    let mut expect = [0u8; 64];
    part.chunks(expect.len()).enumerate().all(|(c, chunk)| {
        let e = &mut expect[..chunk.len()];
        fill_at(e, at + c * 64, total, seq);
        chunk == &*e
    })
}

/// Word `w` (`w >= 1`) of message `seq`: both multiplications are bijections,
/// so two messages differ in every word, and two words of one message differ.
fn pattern(seq: u64, w: usize) -> u64 {
    seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64).wrapping_mul(0xff51_afd7_ed55_8ccd)
}

/// The listener side of an echo-mode server.
pub(super) struct Listen {
    shared: Arc<Shared>,
    slots: u32,
    size: u32,
    /// The most a client may ask for.
    limits: Hello,
}

impl Listen {
    pub(super) fn new(shared: Arc<Shared>, cfg: &Config) -> Self {
        Self {
            shared,
            slots: 2 * cfg.depth,
            size: cfg.size,
            limits: Hello {
                size: cfg.size,
                depth: cfg.depth,
            },
        }
    }
}

impl ListenHandler for Listen {
    type Conn = ServerConn;

    fn qp_config(&self) -> QpConfig {
        QpConfig {
            ntags: 2 * self.slots,
            nbufs: self.slots,
            max_send_wr: self.slots,
            max_recv_wr: self.slots,
        }
    }

    fn connect_request(
        &self,
        req: &ConnectRequest,
    ) -> Result<(impl PinInit<ServerConn, Error>, Option<Ece>), Reject> {
        // What the client asks for, before anything is admitted or allocated.
        if let Err(r) = Hello::check(req.private_data.as_bytes(), self.limits) {
            self.shared.refused(fmt!("{}", r));
            return Err(Reject {
                reason: RejectReason::Consumer,
                private_data: PrivateData::new(&r.encode()).unwrap_or_default(),
            });
        }
        let answer = self.shared.admit(req)?;
        Ok((
            try_pin_init!(ServerConn {
                shared: self.shared.clone(),
                slots: self.slots,
                size: self.size,
                st <- new_mutex!(ConnCounters::default(), "cmecho_native_srv_st"),
            }),
            answer,
        ))
    }

    fn accepted(&self, conn: Arc<Conn<ServerConn>>) {
        self.shared.accepted(conn);
    }

    fn accept_failed(&self, err: StepError) {
        self.shared.accept_failed(&err);
    }

    fn removed(&self) {
        self.shared.listener_removed();
    }
}

/// One connection of an echo-mode server: receive slot `k` (tag `k`) is echoed
/// with send tag `slots + k` and reposted when that send completes.
#[pin_data]
pub(super) struct ServerConn {
    shared: Arc<Shared>,
    slots: u32,
    size: u32,
    #[pin]
    st: Mutex<ConnCounters>,
}

impl ServerConn {
    fn fail(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        if !conn.is_open() {
            // Torn down meanwhile: the failure is the teardown's, not an error.
            return;
        }
        self.st.lock().errors += 1;
        self.shared.error(fmt!("server: echo connection: {}", what));
        conn.close();
    }
}

impl EchoConn for ServerConn {
    fn setup_failed(&self) {}

    fn counters(&self) -> ConnCounters {
        *self.st.lock()
    }
}

impl ConnHandler for ServerConn {
    fn accept_failed(&self, _conn: &Conn<Self>, err: StepError) {
        self.shared.accept_failed(&err);
    }

    fn setup(&self, conn: &Conn<Self>) -> Result {
        conn.with_res(|res| {
            for k in 0..self.slots {
                res.alloc_buf(k, self.size, false)?;
                res.post_recv(k, k, 0, self.size)?;
            }
            Ok(())
        })
    }

    fn established(&self, conn: &Conn<Self>) {
        self.shared.read_back(conn);
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        match status {
            Err(e) if e.is_flush() && !conn.flush_is_failure() => {}
            Err(e) => {
                self.shared.stats(|s| s.wc_error(e.0));
                self.fail(conn, fmt!("work completion failed: {}", e));
            }
            Ok(len) if tag < self.slots => {
                // Echo the message from the buffer it arrived in.
                if conn
                    .with_res(|res| res.post_send(self.slots + tag, tag, 0, len))
                    .is_err()
                {
                    self.fail(conn, fmt!("cannot post the echo"));
                    return;
                }
                {
                    let mut c = self.st.lock();
                    c.messages += 1;
                    c.bytes += u64::from(len);
                }
                self.shared.stats(|s| s.bytes += u64::from(len));
            }
            Ok(_) => {
                let k = tag - self.slots;
                if conn
                    .with_res(|res| res.post_recv(k, k, 0, self.size))
                    .is_err()
                {
                    self.fail(conn, fmt!("cannot repost a receive"));
                    return;
                }
                self.shared.stats(|s| s.pings += 1);
            }
        }
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        if reason == EndReason::DeviceRemoval {
            self.shared.conn_lost_device();
        }
        conn.close();
    }
}

/// Progress of an echo-mode client connection.
struct ClientState {
    /// Sequence number of the next message to send.
    next: u64,
    /// Sequence number of the next echo expected.
    expected: u64,
    inflight: u32,
    /// Send slots whose SEND has not completed yet.
    busy: [u64; (MAX_DEPTH / 64) as usize],
    sent_at: [Option<Instant<Monotonic>>; MAX_DEPTH as usize],
    started: Option<Instant<Monotonic>>,
    /// When the last SEND completed: an acknowledgement, which restarts the
    /// transport's retry timer (an arriving echo does not).
    last_ok: Option<Instant<Monotonic>>,
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
    #[pin]
    st: Mutex<ClientState>,
}

/// Starts client connection `index` of an endpoint in echo mode.
pub(super) fn start(shared: &Arc<Shared>, cfg: &Config, addr: &Addr, index: u32) -> Result {
    let depth = cfg.depth;
    let handler = try_pin_init!(ClientConn {
        shared: shared.clone(),
        index,
        size: cfg.size,
        depth,
        count: cfg.count,
        duration: cfg.duration_ms.map(|ms| Delta::from_millis(i64::from(ms))),
        st <- new_mutex!(ClientState {
            next: 0,
            expected: 0,
            inflight: 0,
            busy: [0; (MAX_DEPTH / 64) as usize],
            sent_at: [None; MAX_DEPTH as usize],
            started: None,
            last_ok: None,
            done: false,
            counters: ConnCounters::default(),
            verify_errors: 0,
        }, "cmecho_native_cli_st"),
    });
    let qp = QpConfig {
        ntags: 2 * depth,
        nbufs: 2 * depth,
        max_send_wr: depth,
        max_recv_wr: depth,
    };
    super::spawn_connect(shared, cfg, addr, index, handler, qp)
}

impl ClientState {
    /// How long the transport has been waiting for an acknowledgement: since the
    /// post of the oldest SEND not completed yet, or since the last SEND
    /// completion if that came later.
    fn waited(&self) -> Option<Delta> {
        let oldest = (0..MAX_DEPTH)
            .filter(|&k| self.is_busy(k))
            .filter_map(|k| self.sent_at.get(k as usize).copied().flatten())
            .map(|t| t.elapsed())
            .max();
        let progress = self.last_ok.map(|t| t.elapsed());
        match (oldest, progress) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
            conn.disconnect();
            conn.close();
        }
    }

    fn on_echo(&self, conn: &Conn<Self>, tag: u32, len: u32) {
        let r = tag - self.depth;
        let (seq, sent) = {
            let st = self.st.lock();
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
            (
                st.expected,
                st.sent_at[(st.expected % u64::from(self.depth)) as usize],
            )
        };
        let good = if len != self.size {
            false
        } else {
            let total = len as usize;
            match conn.with_res(|res| {
                res.scan_buf(self.depth + r, len, |at, c| verify_at(c, at, total, seq))
            }) {
                Ok(same) => same,
                // Closed meanwhile (a stop drained the QP and took its buffers): the
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
        self.shared.stats_rtt(rtt, |s| {
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

    /// The first batch: up to `depth` messages written and posted here, in
    /// process context once the endpoint's clients are all connected or
    /// failed, not in the `ESTABLISHED` handler.
    fn connected(&self, conn: &Conn<Self>) {
        if self.st.lock().done {
            // Ended (and reported) between `ESTABLISHED` and now: its QP, if
            // still there, is not the one to show.
            return;
        }
        self.shared.read_back(conn);
        self.st.lock().started = Some(Instant::now());
        self.pump(conn);
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

    fn established(&self, _conn: &Conn<Self>) {
        self.shared.client_established();
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        match status {
            Err(e) if e.is_flush() && !conn.flush_is_failure() => {}
            Err(e) => {
                let detect = {
                    let mut st = self.st.lock();
                    let first = !st.done && conn.is_open();
                    let us = st
                        .waited()
                        .map(|d| u64::try_from(d.as_micros_ceil()).unwrap_or(0));
                    if first && st.counters.detect_us.is_none() {
                        st.counters.detect_us = us;
                    }
                    us.filter(|_| first)
                };
                self.shared.stats(|s| {
                    s.wc_error(e.0);
                    if let Some(us) = detect {
                        s.record_detection(us);
                    }
                });
                let op = if tag < self.depth { "SEND" } else { "RECV" };
                self.fail(conn, fmt!("{} failed: {}", op, e));
            }
            Ok(_) if tag < self.depth => {
                {
                    let mut st = self.st.lock();
                    st.set_busy(tag, false);
                    st.last_ok = Some(Instant::now());
                }
                self.pump(conn);
            }
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

#[kunit_tests(cmecho_native)]
mod tests {
    use super::*;

    /// Writes the whole of message `seq` into `buf`.
    fn fill(buf: &mut [u8], seq: u64) {
        fill_at(buf, 0, buf.len(), seq);
    }

    /// Whether `buf` is exactly message `seq`.
    fn verify(buf: &[u8], seq: u64) -> bool {
        verify_at(buf, 0, buf.len(), seq)
    }

    #[test]
    fn fill_verify_roundtrip() {
        for size in [1usize, 7, 8, 9, 64, 65, 200] {
            let mut b = [0u8; 200];
            fill(&mut b[..size], 12345);
            assert!(verify(&b[..size], 12345));
            assert!(!verify(&b[..size], 12346));
        }
    }

    #[test]
    fn chunks_match_whole() {
        for total in [1usize, 7, 8, 9, 300, 1000] {
            let mut whole = [0u8; 1000];
            fill(&mut whole[..total], 99);
            let mut parts = [0u8; 1000];
            let mut at = 0;
            while at < total {
                let n = 37.min(total - at);
                fill_at(&mut parts[at..at + n], at, total, 99);
                assert!(verify_at(&whole[at..at + n], at, total, 99));
                at += n;
            }
            assert!(whole[..total] == parts[..total]);
        }
    }

    #[test]
    fn verify_catches_changes() {
        let mut b = [0u8; 100];
        fill(&mut b, 7);
        b[80] ^= 1;
        assert!(!verify(&b, 7));
        let mut one = [0u8; 1];
        fill(&mut one, 3);
        let mut other = [0u8; 1];
        fill(&mut other, 4);
        assert!(one != other);
        // Short messages depend on the bytes of the sequence number that do not fit.
        let (mut a, mut b) = ([0u8; 3], [0u8; 3]);
        fill(&mut a, 0x0100_0000);
        fill(&mut b, 0x0200_0000);
        assert!(a != b);
        // A message and the same words moved by one are different messages.
        let mut w = [0u8; 64];
        fill(&mut w, 5);
        let mut shifted = [0u8; 64];
        shifted[8..].copy_from_slice(&w[..56]);
        shifted[..8].copy_from_slice(&w[..8]);
        assert!(!verify(&shifted, 5));
    }
}
