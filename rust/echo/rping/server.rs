// SPDX-License-Identifier: GPL-2.0

//! The rping server side: for each ping, RDMA-READ the client's source, SEND a
//! go-ahead, RDMA-WRITE the data into the client's sink, SEND a second go-ahead.
//!
//! Every {addr, rkey, size} a client sends is untrusted: a message that is not 16
//! bytes, a zero or oversized size, or a remote access error on a bad rkey tears
//! that one connection down and counts an error; the server goes on serving.
//! An established connection with no completion for
//! [`SERVER_IDLE_MS`](crate::echo::watch::SERVER_IDLE_MS) gets a
//! probe ([`crate::echo::watch`]).

use super::{Msg, MAX_SIZE, MSG_LEN};
use crate::echo::mode::ServerMode;
use crate::echo::watch::{self, Watch};
use crate::echo::{Config, ConnCounters, EchoConn, Shared};
use crate::rdma::verbs::{QpConfig, TAG_REG};
use crate::rdma::WcError;
use crate::rdma::{Conn, ConnHandler, EndReason, StepError};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

/// Completion tags.
const T_RECV: u32 = 0;
const T_SEND: u32 = 1;
const T_READ: u32 = 2;
const T_WRITE: u32 = 3;
/// The probe's (no buffer).
const T_PROBE: u32 = 4;

/// Buffer slots.
const B_RECV: u32 = 0;
const B_GO: u32 = 1;
const B_DATA: u32 = 2;

const QP: QpConfig = QpConfig {
    ntags: 5,
    nbufs: 3,
    max_send_wr: 8,
    max_recv_wr: 4,
};

/// The rping server side of an endpoint.
pub(super) struct Server;

impl ServerMode for Server {
    type Conn = ServerConn;

    fn new(_cfg: &Config) -> Self {
        Self
    }

    fn qp_config(&self) -> QpConfig {
        QP
    }

    fn conn(&self, shared: &Arc<Shared>) -> impl PinInit<ServerConn, Error> {
        try_pin_init!(ServerConn {
            shared: shared.clone(),
            progress <- new_mutex!(Progress {
                phase: Phase::WaitSource,
                read_len: 0,
                counters: ConnCounters::default(),
                go_busy: false,
                watch: Watch::new(),
            }, "cmecho_rping_srv_progress"),
        })
    }
}

/// Where a server connection is in the ping protocol.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for {source}.
    WaitSource,
    /// RDMA READ of the source posted.
    Reading,
    /// Go-ahead sent; waiting for {sink}.
    WaitSink,
    /// RDMA WRITE into the sink posted.
    Writing,
    /// Torn down.
    Done,
}

struct Progress {
    phase: Phase,
    read_len: u32,
    counters: ConnCounters,
    /// A go-ahead SEND is in flight.
    go_busy: bool,
    watch: Watch,
}

/// One accepted connection.
#[pin_data]
pub(super) struct ServerConn {
    shared: Arc<Shared>,
    #[pin]
    progress: Mutex<Progress>,
}

impl ServerConn {
    fn fail(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        if !conn.is_open() {
            // Torn down meanwhile: the failure is the teardown's, not an error.
            return;
        }
        {
            let mut p = self.progress.lock();
            if p.phase == Phase::Done {
                return;
            }
            p.phase = Phase::Done;
            p.counters.errors += 1;
        }
        let qpn = conn.qp_num().unwrap_or(0);
        self.shared.error(fmt!("server: qp {}: {}", qpn, what));
        conn.close();
    }

    fn on_recv(&self, conn: &Conn<Self>, len: u32) -> Result<(), &'static str> {
        let mut m = [0u8; MSG_LEN as usize];
        conn.with_res(|res| res.read_buf(B_RECV, 0, &mut m))
            .map_err(|_| "cannot read the receive buffer")?;
        let msg = Msg::parse(&m, len)
            .map_err(|_| "protocol error: received a message that is not 16 bytes")?;
        let size = msg
            .checked_size(MAX_SIZE)
            .map_err(|_| "protocol error: advertised size is 0 or larger than 64 KiB")?;
        conn.with_res(|res| res.post_recv(T_RECV, B_RECV, 0, MSG_LEN))
            .map_err(|_| "cannot repost the receive")?;
        let mut p = self.progress.lock();
        match p.phase {
            Phase::WaitSource => {
                conn.with_res(|res| {
                    res.post_rdma(T_READ, false, B_DATA, 0, size, msg.addr, msg.rkey)
                })
                .map_err(|_| "cannot post the RDMA READ")?;
                p.phase = Phase::Reading;
                p.read_len = size;
                Ok(())
            }
            Phase::WaitSink => {
                if size < p.read_len {
                    return Err("protocol error: sink smaller than the source");
                }
                let n = p.read_len;
                conn.with_res(|res| res.post_rdma(T_WRITE, true, B_DATA, 0, n, msg.addr, msg.rkey))
                    .map_err(|_| "cannot post the RDMA WRITE")?;
                p.phase = Phase::Writing;
                Ok(())
            }
            _ => Err("protocol error: unexpected message"),
        }
    }

    fn go_ahead(&self, conn: &Conn<Self>, next: Phase) -> Result {
        conn.with_res(|res| res.post_send(T_SEND, B_GO, 0, MSG_LEN))?;
        let mut p = self.progress.lock();
        p.phase = next;
        p.go_busy = true;
        Ok(())
    }
}

impl EchoConn for ServerConn {
    fn setup_failed(&self) {}

    fn counters(&self) -> ConnCounters {
        self.progress.lock().counters
    }

    /// Probes the client once the connection has been idle (no completion,
    /// nothing of its own in flight) for
    /// [`SERVER_IDLE_MS`](crate::echo::watch::SERVER_IDLE_MS).
    fn tick(&self, conn: &Conn<Self>) -> Option<u32> {
        if !conn.is_open() {
            return None;
        }
        let mut p = self.progress.lock();
        let again = p.watch.again_ms();
        match p.phase {
            Phase::Done => return None,
            Phase::WaitSource | Phase::WaitSink if !p.go_busy => {}
            // An RDMA READ, WRITE or go-ahead in flight: the transport
            // watches it.
            _ => return Some(again),
        }
        let checked = p.watch.check(conn, T_PROBE, true);
        drop(p);
        watch::verdict(checked, again, |why| self.fail(conn, why))
    }
}

impl ConnHandler for ServerConn {
    fn accept_failed(&self, _conn: &Conn<Self>, err: StepError) {
        self.shared.accept_failed(&err);
    }

    fn setup(&self, conn: &Conn<Self>) -> Result {
        conn.with_res(|res| {
            res.alloc_buf(B_RECV, MSG_LEN, false)?;
            res.alloc_buf(B_GO, MSG_LEN, false)?;
            res.alloc_buf(B_DATA, MAX_SIZE, false)?;
            res.post_recv(T_RECV, B_RECV, 0, MSG_LEN)
        })
    }

    fn endpoint_name(&self) -> &CStr {
        self.shared.c_name()
    }

    fn established(&self, conn: &Conn<Self>) {
        self.shared.read_back(conn);
        self.progress.lock().watch.start_server();
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        {
            let mut p = self.progress.lock();
            if p.phase == Phase::Done {
                return;
            }
            match (tag, &status) {
                (T_PROBE, Ok(_)) => p.watch.probe_acked(),
                (T_SEND, Ok(_)) => {
                    p.go_busy = false;
                    p.watch.acked();
                }
                (_, Ok(_)) => p.watch.acked(),
                _ => {}
            }
        }
        let r = match (tag, status) {
            (_, Err(e)) if e.is_flush() && !conn.flush_is_failure() => Ok(()),
            (_, Err(e)) => {
                let op = match tag {
                    T_RECV => "RECV",
                    T_SEND => "SEND",
                    T_READ => "RDMA READ",
                    T_PROBE => "probe",
                    TAG_REG => "memory registration",
                    _ => "RDMA WRITE",
                };
                self.fail(conn, fmt!("{} failed: {}", op, e));
                return;
            }
            (T_RECV, Ok(len)) => self.on_recv(conn, len),
            (T_READ, Ok(_)) => self
                .go_ahead(conn, Phase::WaitSink)
                .map_err(|_| "cannot send the go-ahead"),
            (T_WRITE, Ok(_)) => {
                let n = {
                    let mut p = self.progress.lock();
                    p.counters.messages += 1;
                    p.counters.bytes += u64::from(p.read_len);
                    p.read_len
                };
                self.shared.stats(|s| {
                    s.pings += 1;
                    s.bytes += u64::from(n);
                });
                self.go_ahead(conn, Phase::WaitSource)
                    .map_err(|_| "cannot send the go-ahead")
            }
            _ => Ok(()),
        };
        if let Err(msg) = r {
            self.fail(conn, fmt!("{}", msg));
        }
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        self.progress.lock().phase = Phase::Done;
        if reason == EndReason::DeviceRemoval {
            self.shared.conn_lost_device();
        }
        conn.close();
    }
}
