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
use crate::rdma::{Conn, ConnHandler, ConnectRequest, EndReason, Reject, RejectReason, StepError};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

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
            st <- new_mutex!(SrvState {
                counters: ConnCounters::default(),
                sends: 0,
                watch: Watch::new(),
            }, "cmecho_native_srv_st"),
        })
    }
}

/// What an echo-mode server connection keeps under its lock.
struct SrvState {
    counters: ConnCounters,
    /// Echoes posted and not completed yet.
    sends: u32,
    watch: Watch,
}

/// One connection of an echo-mode server: receive slot `k` (tag `k`) is echoed
/// with send tag `slots + k` and reposted when that send completes.
#[pin_data]
pub(super) struct ServerConn {
    shared: Arc<Shared>,
    slots: u32,
    size: u32,
    #[pin]
    st: Mutex<SrvState>,
}

impl ServerConn {
    fn fail(&self, conn: &Conn<Self>, what: core::fmt::Arguments<'_>) {
        if !conn.is_open() {
            // Torn down meanwhile: the failure is the teardown's, not an error.
            return;
        }
        self.st.lock().counters.errors += 1;
        self.shared.error(fmt!("server: echo connection: {}", what));
        conn.close();
    }

    /// The probe's tag: after the receive and send slots.
    fn probe_tag(&self) -> u32 {
        2 * self.slots
    }
}

impl EchoConn for ServerConn {
    fn setup_failed(&self) {}

    fn counters(&self) -> ConnCounters {
        self.st.lock().counters
    }

    /// Probes the client once the connection has been idle (no completion,
    /// no echo in flight) for
    /// [`SERVER_IDLE_MS`](crate::echo::watch::SERVER_IDLE_MS).
    fn tick(&self, conn: &Conn<Self>) -> Option<u32> {
        if !conn.is_open() {
            return None;
        }
        let mut st = self.st.lock();
        let idle = st.sends == 0;
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
                {
                    let mut st = self.st.lock();
                    st.sends += 1;
                    st.watch.acked();
                    st.counters.messages += 1;
                    st.counters.bytes += u64::from(len);
                }
                self.shared.stats(|s| s.bytes += u64::from(len));
            }
            Ok(_) => {
                {
                    let mut st = self.st.lock();
                    st.sends = st.sends.saturating_sub(1);
                    st.watch.acked();
                }
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
