// SPDX-License-Identifier: GPL-2.0

//! The rping client side: connect, then `count` pings of `size` bytes, each one
//! validated byte for byte.
//!
//! One ping: fill the source buffer, SEND {source}, wait for the server's first
//! go-ahead (it has RDMA-READ the source), SEND {sink}, wait for the second
//! go-ahead (it has RDMA-WRITten the sink), compare sink and source. Everything
//! after the connect runs in completion handlers: no thread waits per connection.
//! A wait for a go-ahead with no SEND in flight is watched
//! ([`crate::echo::watch`]): probes detect a server that dies, and a go-ahead
//! that has not come `echo_timeout_ms` after the SEND's acknowledgement fails
//! the connection.

use super::{Msg, MSG_LEN};
use crate::echo::watch::{self, Watch};
use crate::echo::{spawn_connect, Addr, Config, ConnCounters, EchoConn, ErrName, Shared};
use crate::rdma::verbs::{QpConfig, TAG_REG};
use crate::rdma::WcError;
use crate::rdma::{Conn, ConnHandler, EndReason};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::time::{Delta, Instant, Monotonic};

/// Completion tags.
const T_RECV: u32 = 0;
const T_SEND: u32 = 1;
/// The probe's (no buffer).
const T_PROBE: u32 = 2;

/// Buffer slots.
const B_RECV: u32 = 0;
const B_SRC_MSG: u32 = 1;
const B_SINK_MSG: u32 = 2;
const B_SRC: u32 = 3;
const B_SINK: u32 = 4;

const QP: QpConfig = QpConfig {
    ntags: 3,
    nbufs: 5,
    max_send_wr: 16,
    max_recv_wr: 4,
};

/// Where a client connection is in the ping protocol.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the connection is established.
    Setup,
    /// SENT {source}; waiting for the first go-ahead.
    WaitRead,
    /// SENT {sink}; waiting for the second go-ahead.
    WaitWrite,
    /// Finished, successfully or not.
    Done,
}

struct Progress {
    phase: Phase,
    n: u64,
    errors: u64,
    started: Option<Instant<Monotonic>>,
    run_started: Option<Instant<Monotonic>>,
    src: Msg,
    sink: Msg,
    /// SENDs posted and not completed yet.
    sends: u32,
    /// When the SEND the current wait follows completed: the server's device
    /// has it, and its answer is due.
    acked_at: Option<Instant<Monotonic>>,
    watch: Watch,
}

/// One client connection.
#[pin_data]
pub(super) struct ClientConn {
    shared: Arc<Shared>,
    index: u32,
    size: u32,
    count: u64,
    echo_timeout_ms: u32,
    #[pin]
    progress: Mutex<Progress>,
}

/// Starts client connection `index` of an endpoint in rping mode.
pub(super) fn start(shared: &Arc<Shared>, cfg: &Config, addr: &Addr, index: u32) -> Result {
    let handler = try_pin_init!(ClientConn {
        shared: shared.clone(),
        index,
        size: cfg.size,
        count: cfg.count,
        echo_timeout_ms: cfg.echo_timeout_ms,
        progress <- new_mutex!(Progress {
            phase: Phase::Setup,
            n: 0,
            errors: 0,
            started: None,
            run_started: None,
            src: Msg { addr: 0, rkey: 0, size: 0 },
            sink: Msg { addr: 0, rkey: 0, size: 0 },
            sends: 0,
            acked_at: None,
            watch: Watch::new(),
        }, "cmecho_rping_cli_progress"),
    });
    spawn_connect(shared, cfg, addr, index, handler, QP)
}

impl ClientConn {
    /// Marks this connection finished and updates the endpoint's state.
    fn finish(&self, ok: bool) {
        {
            let mut p = self.progress.lock();
            if p.phase == Phase::Done {
                return;
            }
            p.phase = Phase::Done;
            if !ok {
                p.errors += 1;
            }
        }
        self.shared.client_finished(ok);
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
        self.shared.error(fmt!("client {}: {}", self.index, what));
        self.finish(false);
        conn.close();
    }

    /// Fills the source buffer with ping `n` and SENDs its location.
    fn start_ping(&self, conn: &Conn<Self>) -> Result {
        let mut p = self.progress.lock();
        let n = p.n;
        let src = p.src;
        conn.with_res(|res| {
            let total = self.size as usize;
            res.produce_buf(B_SRC, self.size, |at, c| {
                super::fill_payload_at(c, at, total, n)
            })?;
            res.produce_buf(B_SINK, self.size, |_, c| c.fill(0))?;
            let mut m = [0u8; MSG_LEN as usize];
            src.encode(&mut m)?;
            res.write_buf(B_SRC_MSG, 0, &m)?;
            res.post_send(T_SEND, B_SRC_MSG, 0, MSG_LEN)
        })?;
        p.sends += 1;
        p.acked_at = None;
        p.phase = Phase::WaitRead;
        p.started = Some(Instant::now());
        Ok(())
    }

    fn on_recv(&self, conn: &Conn<Self>, len: u32) -> Result<(), &'static str> {
        if len != MSG_LEN {
            return Err("protocol error: received a message that is not 16 bytes");
        }
        // The answer is here: its deadline no longer runs ([`ClientConn::watch`]).
        self.progress.lock().acked_at = None;
        conn.with_res(|res| res.post_recv(T_RECV, B_RECV, 0, MSG_LEN))
            .map_err(|_| "cannot repost the receive")?;
        let phase = self.progress.lock().phase;
        match phase {
            Phase::WaitRead => {
                let sink = self.progress.lock().sink;
                conn.with_res(|res| {
                    let mut m = [0u8; MSG_LEN as usize];
                    sink.encode(&mut m)?;
                    res.write_buf(B_SINK_MSG, 0, &m)?;
                    res.post_send(T_SEND, B_SINK_MSG, 0, MSG_LEN)
                })
                .map_err(|_| "cannot send the sink buffer")?;
                // Its completion comes through this CQ's work, which is
                // running this: after these lines.
                let mut p = self.progress.lock();
                p.sends += 1;
                p.acked_at = None;
                p.phase = Phase::WaitWrite;
                Ok(())
            }
            Phase::WaitWrite => {
                let same = conn
                    .with_res(|res| res.same_bytes(B_SRC, B_SINK))
                    .map_err(|_| "cannot read the buffers")?;
                if !same {
                    self.shared.stats(|s| s.verify_errors += 1);
                    return Err("data mismatch: the echoed ping differs from the one sent");
                }
                let (done, rtt) = {
                    let mut p = self.progress.lock();
                    p.n += 1;
                    (p.n >= self.count, p.started.map(|t| t.elapsed()))
                };
                self.shared.stats_rtt(conn.serial(), self.size, rtt, |s| {
                    s.pings += 1;
                    s.bytes += u64::from(self.size);
                });
                if done {
                    // Not under `progress`: `Shared::inner` is taken after it nowhere.
                    let started = self.progress.lock().run_started;
                    if let Some(t) = started {
                        self.shared.stats(|s| s.run_time(t.elapsed()));
                    }
                    self.finish(true);
                    // The close disconnects, from its work item.
                    conn.close();
                    Ok(())
                } else {
                    self.start_ping(conn)
                        .map_err(|_| "cannot start the next ping")
                }
            }
            Phase::Setup | Phase::Done => Err("protocol error: unexpected message"),
        }
    }
}

impl ClientConn {
    /// The watch ([`EchoConn::tick`]): fails the connection when the server's
    /// go-ahead has not come `echo_timeout_ms` after the SEND it answers was
    /// acknowledged, and posts a probe when one is due ([`Watch`]).
    fn watch(&self, conn: &Conn<Self>) -> Option<u32> {
        let mut p = self.progress.lock();
        let again = p.watch.again_ms();
        match p.phase {
            Phase::Done => return None,
            Phase::Setup => return Some(again),
            Phase::WaitRead | Phase::WaitWrite => {}
        }
        let limit = Delta::from_millis(i64::from(self.echo_timeout_ms));
        let late = p.sends == 0 && p.acked_at.is_some_and(|t| t.elapsed() >= limit);
        if late {
            let n = p.n;
            drop(p);
            self.fail(
                conn,
                fmt!(
                    "ping {}: no answer within echo_timeout_ms {} of its acknowledgement",
                    n,
                    self.echo_timeout_ms
                ),
            );
            return None;
        }
        let idle = p.sends == 0;
        let checked = p.watch.check(conn, T_PROBE, idle);
        drop(p);
        watch::verdict(checked, again, |why| self.fail(conn, why))
    }
}

impl EchoConn for ClientConn {
    fn tick(&self, conn: &Conn<Self>) -> Option<u32> {
        self.watch(conn)
    }

    fn setup_failed(&self) {
        self.finish(false);
    }

    fn counters(&self) -> ConnCounters {
        let p = self.progress.lock();
        ConnCounters {
            messages: p.n,
            bytes: p.n * u64::from(self.size),
            errors: p.errors,
            detect_us: None,
        }
    }

    /// The first ping, in process context once the endpoint's clients are
    /// all connected or failed, not in the `ESTABLISHED` handler.
    fn connected(&self, conn: &Conn<Self>) {
        if self.progress.lock().phase == Phase::Done {
            // Ended (and reported) between `ESTABLISHED` and now.
            return;
        }
        let qp = self.shared.read_back(conn);
        {
            let mut p = self.progress.lock();
            p.watch.start(qp);
            p.run_started = Some(Instant::now());
        }
        // The source is read by the server, the sink written: fast registrations,
        // posted ahead of the first SEND that advertises them.
        let regs =
            conn.with_res(|res| Ok((res.reg_buf(B_SRC, false)?, res.reg_buf(B_SINK, true)?)));
        match regs {
            Ok(((src_rkey, src_addr), (sink_rkey, sink_addr))) => {
                {
                    let mut p = self.progress.lock();
                    p.src = Msg {
                        addr: src_addr,
                        rkey: src_rkey,
                        size: self.size,
                    };
                    p.sink = Msg {
                        addr: sink_addr,
                        rkey: sink_rkey,
                        size: self.size,
                    };
                }
                if let Err(e) = self.start_ping(conn) {
                    self.fail(conn, fmt!("cannot send the first ping: {}", ErrName(e)));
                }
            }
            Err(e) => self.fail(conn, fmt!("cannot register buffers: {}", ErrName(e))),
        }
    }
}

impl ConnHandler for ClientConn {
    fn setup(&self, conn: &Conn<Self>) -> Result {
        conn.with_res(|res| {
            res.alloc_buf(B_RECV, MSG_LEN, false)?;
            res.alloc_buf(B_SRC_MSG, MSG_LEN, false)?;
            res.alloc_buf(B_SINK_MSG, MSG_LEN, false)?;
            res.alloc_buf(B_SRC, self.size, true)?;
            res.alloc_buf(B_SINK, self.size, true)?;
            res.post_recv(T_RECV, B_RECV, 0, MSG_LEN)
        })
    }

    fn endpoint_name(&self) -> &CStr {
        self.shared.c_name()
    }

    fn established(&self, _conn: &Conn<Self>) {
        self.shared.client_established();
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        if self.progress.lock().phase == Phase::Done {
            return;
        }
        match status {
            Err(e) if e.is_flush() && !conn.flush_is_failure() => {}
            Err(e) => {
                let op = match tag {
                    T_RECV => "RECV",
                    TAG_REG => "memory registration",
                    T_PROBE => "probe",
                    _ => "SEND",
                };
                self.fail(conn, fmt!("{} failed: {}", op, e));
            }
            Ok(len) if tag == T_RECV => {
                if let Err(msg) = self.on_recv(conn, len) {
                    let n = self.progress.lock().n;
                    self.fail(conn, fmt!("ping {}: {}", n, msg));
                }
            }
            Ok(_) if tag == T_SEND => {
                let mut p = self.progress.lock();
                p.sends = p.sends.saturating_sub(1);
                p.watch.acked();
                if p.sends == 0 && p.acked_at.is_none() {
                    p.acked_at = Some(Instant::now());
                }
            }
            Ok(_) if tag == T_PROBE => self.progress.lock().watch.probe_acked(),
            Ok(_) => {}
        }
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        if self.progress.lock().phase != Phase::Done {
            let n = self.progress.lock().n;
            let why = match reason {
                EndReason::Disconnected => "the peer disconnected",
                EndReason::DeviceRemoval => "the RDMA device was removed",
            };
            self.abort(conn, fmt!("{} after {} pings", why, n));
        } else {
            conn.close();
        }
    }
}
