// SPDX-License-Identifier: GPL-2.0

//! The native echo server side: every message a client SENDs is SENT back
//! from the buffer it arrived in, with `2 × depth` receives posted per
//! connection (half may be busy echoing). An established connection with no
//! completion for [`SERVER_IDLE_MS`](crate::echo::watch::SERVER_IDLE_MS)
//! gets a probe ([`crate::echo::watch`]).

use crate::echo::hello::Hello;
use crate::echo::mode::ServerMode;
use crate::echo::watch::{self, Watch};
use crate::echo::{Config, ConnCounters, EchoConn, Shared};
use crate::rdma::params::PrivateData;
use crate::rdma::verbs::QpConfig;
use crate::rdma::WcError;
use crate::rdma::{
    Conn, ConnHandler, ConnectRequest, EndReason, Fast, FastDone, Post, Reject, RejectReason,
    StepError,
};
use kernel::prelude::*;
use kernel::sync::{new_mutex, new_spinlock_irq, Arc, Mutex, SpinLockIrq};
use kernel::time::{Instant, Monotonic};

/// The native echo server side of an endpoint.
pub(super) struct Server {
    slots: u32,
    size: u32,
    /// The most a client may ask for.
    limits: Hello,
}

impl ServerMode for Server {
    type Conn = ServerConn;

    fn new(cfg: &Config) -> Self {
        Self {
            slots: 2 * cfg.depth,
            size: cfg.size,
            limits: Hello {
                size: cfg.size,
                depth: cfg.depth,
            },
        }
    }

    fn qp_config(&self) -> QpConfig {
        // Tag `2 × slots` is the probe's, which has no buffer.
        QpConfig {
            ntags: 2 * self.slots + 1,
            nbufs: self.slots,
            max_send_wr: self.slots + 1,
            max_recv_wr: self.slots,
        }
    }

    /// What the client asks for, before anything is admitted or allocated.
    fn check(&self, shared: &Shared, req: &ConnectRequest) -> Result<(), Reject> {
        match Hello::check(req.private_data.as_bytes(), self.limits) {
            Ok(_) => Ok(()),
            Err(r) => {
                shared.refused(fmt!("{}", r));
                Err(Reject {
                    reason: RejectReason::Consumer,
                    private_data: PrivateData::new(&r.encode()).unwrap_or_default(),
                })
            }
        }
    }

    fn conn(&self, shared: &Arc<Shared>) -> impl PinInit<ServerConn, Error> {
        try_pin_init!(ServerConn {
            shared: shared.clone(),
            slots: self.slots,
            size: self.size,
            hot <- new_spinlock_irq!(SrvHot {
                counters: ConnCounters::default(),
                sends: 0,
                last_ok: None,
            }, "cmecho_native_srv_hot"),
            st <- new_mutex!(SrvState {
                watch: Watch::new(),
            }, "cmecho_native_srv_st"),
        })
    }
}

/// What an echo-mode server connection's completions update, in process
/// context or in the CQ's softirq ([`ConnHandler::fast_completion`]).
struct SrvHot {
    counters: ConnCounters,
    /// Echoes posted and not completed yet.
    sends: u32,
    /// When the last echo completed: an acknowledgement, for the watch.
    last_ok: Option<Instant<Monotonic>>,
}

/// What an echo-mode server connection keeps under its lock.
struct SrvState {
    watch: Watch,
}

/// One connection of an echo-mode server: receive slot `k` (tag `k`) is echoed
/// with send tag `slots + k` and reposted when that send completes.
///
/// Its locks are never nested: `st` is taken in process context only, `hot`
/// (interrupts off) anywhere.
#[pin_data]
pub(super) struct ServerConn {
    shared: Arc<Shared>,
    slots: u32,
    size: u32,
    #[pin]
    hot: SpinLockIrq<SrvHot>,
    #[pin]
    st: Mutex<SrvState>,
}

impl ServerConn {
    fn fail(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        if !conn.is_open() {
            // Torn down meanwhile: the failure is the teardown's, not an error.
            return;
        }
        self.hot.lock().counters.errors += 1;
        self.shared.error(fmt!("server: echo connection: {}", what));
        conn.close();
    }

    /// The probe's tag: after the receive and send slots.
    fn probe_tag(&self) -> u32 {
        2 * self.slots
    }

    /// Message `len` bytes long was echoed (its SEND posted).
    fn echoed(&self, len: u32) {
        let mut h = self.hot.lock();
        h.sends += 1;
        h.last_ok = Some(Instant::now());
        h.counters.messages += 1;
        h.counters.bytes += u64::from(len);
    }

    /// An echo's SEND completed.
    fn echo_done(&self) {
        let mut h = self.hot.lock();
        h.sends = h.sends.saturating_sub(1);
        h.last_ok = Some(Instant::now());
    }
}

impl EchoConn for ServerConn {
    fn setup_failed(&self) {}

    fn counters(&self) -> ConnCounters {
        self.hot.lock().counters
    }

    /// Probes the client once the connection has been idle (no completion,
    /// no echo in flight) for
    /// [`SERVER_IDLE_MS`](crate::echo::watch::SERVER_IDLE_MS).
    fn tick(&self, conn: &Conn<Self>) -> Option<u32> {
        if !conn.is_open() {
            return None;
        }
        let (idle, last_ok) = {
            let h = self.hot.lock();
            (h.sends == 0, h.last_ok)
        };
        let mut st = self.st.lock();
        if let Some(t) = last_ok {
            st.watch.acked_at(t);
        }
        let checked = st.watch.check(conn, self.probe_tag(), idle);
        let again = st.watch.again_ms();
        drop(st);
        watch::verdict(checked, again, |why| self.fail(conn, why))
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

    fn endpoint_name(&self) -> &CStr {
        self.shared.c_name()
    }

    fn established(&self, conn: &Conn<Self>) {
        self.shared.read_back(conn);
        self.st.lock().watch.start_server();
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        match status {
            Err(e) if e.is_flush() && !conn.flush_is_failure() => {}
            Err(e) => {
                self.shared.stats(|s| s.wc_error(e.0));
                if tag == self.probe_tag() {
                    self.fail(conn, fmt!("probe failed: {}", e));
                } else {
                    self.fail(conn, fmt!("work completion failed: {}", e));
                }
            }
            Ok(_) if tag == self.probe_tag() => self.st.lock().watch.probe_acked(),
            Ok(len) if tag < self.slots => {
                // Echo the message from the buffer it arrived in.
                if conn
                    .with_res(|res| res.post_send(self.slots + tag, tag, 0, len))
                    .is_err()
                {
                    self.fail(conn, fmt!("cannot post the echo"));
                    return;
                }
                self.echoed(len);
                self.shared.stats(|s| s.bytes += u64::from(len));
            }
            Ok(_) => {
                self.echo_done();
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

    /// An echo's two steps, in the CQ's softirq: a message arrived, so its
    /// echo is posted; an echo was sent, so its receive is posted again. A
    /// probe's completion, which takes the watch's lock, is deferred, as is
    /// a step whose post fails (then nothing of it is done here).
    fn fast_completion(&self, fast: &Fast<'_, Self>, tag: u32, len: u32) -> FastDone {
        if tag < self.slots {
            if fast.post_send(self.slots + tag, tag, 0, len).is_err() {
                return FastDone::Defer;
            }
            self.echoed(len);
            self.shared.fast_stats(u64::from(len), 0);
        } else if tag < self.probe_tag() {
            let k = tag - self.slots;
            if fast.post_recv(k, k, 0, self.size).is_err() {
                return FastDone::Defer;
            }
            self.echo_done();
            self.shared.fast_stats(0, 1);
        } else {
            return FastDone::Defer;
        }
        FastDone::Done
    }

    fn ended(&self, conn: &Conn<Self>, reason: EndReason) {
        if reason == EndReason::DeviceRemoval {
            self.shared.conn_lost_device();
        }
        conn.close();
    }
}
