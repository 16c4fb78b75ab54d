// SPDX-License-Identifier: GPL-2.0

//! misuse: a third-party ULP doing what cmecho's `rdma` layer must refuse; the
//! fixture of `misuse.sh`.
//!
//! Each misuse is a call the layer's safe API allows to be written; none may hang,
//! leak or corrupt anything: the layer refuses it with an errno and the connection
//! carries on. At load the sample listens on `addr`:`port`, connects to itself
//! there, commits misuse `case`, closes everything and logs the answer:
//!
//! - 0: `close_and_wait` from the passive side's `setup` (the accept's work item,
//!   holding the new id's handler mutex),
//! - 1: `close_and_wait` from `accepted` (the request's CM handler),
//! - 2: none any more: `connect` on an accepted connection does not compile
//!   (only the [`rdma::Connector`] of [`Conn::new_active`] connects), which
//!   `build_fail/connect_accepted.rs` shows,
//! - 3: `close_and_wait` from a completion of the connection's own CQ,
//! - 4: `close_and_wait` from a `with_res` closure of the same connection,
//! - 5: each end's completion `close_and_wait`s the other end, both at once,
//! - 6: `connect` of a new connection from `accepted` (a CM handler),
//! - 7: `with_res` of the accepted end from a `with_res` closure of the active
//!   end,
//! - 8: `disconnect_and_wait` from `accepted` (a CM handler).
//!
//! ```text
//! ip netns exec a insmod cmecho_misuse.ko addr=10.77.0.1 port=7190 case=3
//! ```
//!
//! Load fails with `EINVAL` unless the misuse was refused with the expected errno.

#[path = "../../../../../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the sample uses part of the layer")]
mod rdma;

use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex, MutexGuard};
use kernel::time::msecs_to_jiffies;
use rdma::params::Ece;
use rdma::verbs::QpConfig;
use rdma::WcError;
use rdma::{
    Conn, ConnHandler, ConnParams, ConnectRequest, EndReason, ListenHandler, Listener, NetNs,
    Reject, StepError,
};

module! {
    type: Misuse,
    name: "cmecho_misuse",
    authors: ["cmecho developers"],
    description: "Commits one misuse of cmecho's Rust RDMA layer and logs the answer",
    license: "GPL",
    params: {
        port: u16 {
            default: 7190,
            description: "Port to listen on and connect to",
        },
        case: u32 {
            default: 0,
            description: "The misuse: 0 setup, 1 accepted, 3 completion, 4 with_res, 5 cycle, 6 connect in accepted, 7 nested with_res, 8 disconnect_and_wait in accepted",
        },
    },
}

/// The C side's functions (`misuse.h`), as bindgen declares them (`Kbuild`).
#[allow(unreachable_pub, reason = "bindgen's output: `pub` items")]
mod c {
    use kernel::ffi;
    include!(env!("CMECHO_C_FFI"));
}

/// The misuses, by `case`: name and the errno the layer must answer with.
/// Case 2 is `None`: it moved to a check that the misuse does not build.
const CASES: [Option<(&str, Error)>; 9] = [
    Some(("close_and_wait in setup", EDEADLK)),
    Some(("close_and_wait in accepted", EDEADLK)),
    None,
    Some(("close_and_wait in a completion", EDEADLK)),
    Some(("close_and_wait in with_res", EDEADLK)),
    Some(("close_and_wait of each other in two completions", EDEADLK)),
    Some(("connect in accepted", EDEADLK)),
    Some(("with_res nested in another connection's with_res", EDEADLK)),
    Some(("disconnect_and_wait in accepted", EDEADLK)),
];

/// Tags and buffers: 0 receives (and case 3 sends), 1 sends in case 5.
const QP: QpConfig = QpConfig {
    ntags: 2,
    nbufs: 2,
    max_send_wr: 1,
    max_recv_wr: 1,
};

/// How long each end's completion waits for the other's in case 5.
const RENDEZVOUS_MS: u32 = 5000;

/// What the misuse returned, and both ends (the sample's to close).
struct Found {
    answer: Option<Result>,
    accepted: Option<Arc<Conn<Peer>>>,
    active: Option<Arc<Conn<Peer>>>,
    /// Case 5: the completions that reached the rendezvous.
    inside: u32,
}

#[pin_data]
struct Findings {
    #[pin]
    m: Mutex<Found>,
    #[pin]
    cv: CondVar,
}

impl Findings {
    fn record(&self, r: Result) {
        let mut g = self.m.lock();
        if g.answer.is_none() {
            g.answer = Some(r);
        }
        drop(g);
        self.cv.notify_all();
    }

    /// Waits, up to `ms`, until `done` holds; returns the lock either way.
    fn wait_until(&self, ms: u32, done: impl Fn(&Found) -> bool) -> MutexGuard<'_, Found> {
        let mut g = self.m.lock();
        let mut left = msecs_to_jiffies(ms);
        while !done(&g) && left > 0 {
            left = match self.cv.wait_interruptible_timeout(&mut g, left) {
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => jiffies,
                _ => 0,
            };
        }
        g
    }

    /// Case 5: waits, up to [`RENDEZVOUS_MS`], until both ends' completions are
    /// here, then returns the other end.
    fn rendezvous(&self, passive: bool) -> Option<Arc<Conn<Peer>>> {
        self.m.lock().inside += 1;
        self.cv.notify_all();
        let g = self.wait_until(RENDEZVOUS_MS, |found| found.inside >= 2);
        if passive {
            g.active.clone()
        } else {
            g.accepted.clone()
        }
    }
}

/// Both ends' connection handler; commits the misuses that belong to a callback.
struct Peer {
    f: Arc<Findings>,
    passive: bool,
    case: u32,
}

impl ConnHandler for Peer {
    fn setup(&self, conn: &Conn<Self>) -> Result {
        conn.with_res(|res| res.alloc_buf(0, 16, false))?;
        if self.case == 5 {
            conn.with_res(|res| res.alloc_buf(1, 16, false))?;
        }
        if self.passive || self.case == 5 {
            conn.with_res(|res| res.post_recv(0, 0, 0, 16))?;
            if self.case == 0 {
                self.f.record(conn.close_and_wait());
            }
        }
        Ok(())
    }

    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>) {
        if !self.passive && self.case == 3 && status.is_ok() {
            self.f.record(conn.close_and_wait());
        }
        if self.case == 5 && tag == 0 && status.is_ok() {
            // Both ends' completions run at once, and each closes the other.
            if let Some(other) = self.f.rendezvous(self.passive) {
                self.f.record(other.close_and_wait());
            }
        }
    }

    fn established(&self, _conn: &Conn<Self>) {}

    fn ended(&self, conn: &Conn<Self>, _reason: EndReason) {
        conn.close();
    }
}

/// The listener's handler; commits the misuses of `accepted`.
struct Server {
    f: Arc<Findings>,
    net: NetNs,
    addr: &'static CStr,
    case: u32,
}

impl Server {
    /// Case 6: a new connection, to this same listener, from a CM handler.
    fn connect_another(&self) -> Result {
        let peer = Peer {
            f: self.f.clone(),
            passive: false,
            case: 6,
        };
        let connector = Conn::new_active(Ok::<_, Error>(peer), ConnParams::default())?;
        let conn = connector.conn().clone();
        let port = module_parameters::port.value();
        let r = connector.connect(&self.net, self.addr, port, QP);
        // Should it have connected, it closes after this handler.
        conn.close();
        r.map_err(|e: StepError| e.err)
    }
}

impl ListenHandler for Server {
    type Conn = Peer;

    fn qp_config(&self) -> QpConfig {
        QP
    }

    fn connect_request(
        &self,
        _req: &ConnectRequest,
    ) -> Result<(impl PinInit<Peer, Error>, Option<Ece>), Reject> {
        let peer = Peer {
            f: self.f.clone(),
            passive: true,
            case: self.case,
        };
        Ok((Ok::<_, Error>(peer), None))
    }

    fn accepted(&self, conn: Arc<Conn<Peer>>) {
        let r = match self.case {
            1 => Some(conn.close_and_wait()),
            6 => Some(self.connect_another()),
            // It would wait for DISCONNECTED, which this handler holds up.
            8 => Some(conn.disconnect_and_wait(2000).map_err(|e| e.err)),
            _ => None,
        };
        // Kept before the answer is recorded: `commit` closes it once it has both.
        self.f.m.lock().accepted = Some(conn);
        if let Some(r) = r {
            self.f.record(r);
        } else {
            self.f.cv.notify_all();
        }
    }

    fn accept_failed(&self, err: StepError) {
        pr_warn!("accept failed at {}: {:?}\n", err.step, err.err);
    }

    fn removed(&self) {}
}

/// Commits the misuse; the answer it got, or why it could not be committed.
fn commit(case: u32) -> Result<Result> {
    // SAFETY: `misuse_addr` returns the module parameter's NUL-terminated buffer,
    // which lives as long as the module.
    let addr = unsafe { CStr::from_char_ptr(c::misuse_addr()) };
    let port = module_parameters::port.value();
    let f = Arc::pin_init(
        pin_init!(Findings {
            m <- new_mutex!(
                Found {
                    answer: None,
                    accepted: None,
                    active: None,
                    inside: 0,
                },
                "misuse_found"
            ),
            cv <- new_condvar!("misuse_found_cv"),
        }),
        GFP_KERNEL,
    )?;
    let server = Server {
        f: f.clone(),
        net: NetNs::current()?,
        addr,
        case,
    };
    let net = NetNs::current()?;
    let l = Listener::listen(&net, addr, port, ConnParams::default(), server)?;
    let r = exchange(&f, &net, addr, case, &l);
    // The listener listens until stopped, on every path.
    l.stop();
    r
}

/// Connects to the listener, commits the misuse, closes both ends.
fn exchange(
    f: &Arc<Findings>,
    net: &NetNs,
    addr: &CStr,
    case: u32,
    l: &Listener<Server>,
) -> Result<Result> {
    let peer = Peer {
        f: f.clone(),
        passive: false,
        case,
    };
    let connector = Conn::new_active(Ok::<_, Error>(peer), ConnParams::default())?;
    let conn = connector.conn().clone();
    let connected = connector.connect(net, addr, module_parameters::port.value(), QP);
    f.m.lock().active = Some(conn.clone());
    let posted = match connected {
        Ok(()) if case == 3 => conn.with_res(|res| res.post_send(0, 0, 0, 16)),
        Ok(()) if case == 4 => {
            f.record(conn.with_res(|_| conn.close_and_wait()));
            Ok(())
        }
        Ok(()) if case == 5 => cross_sends(f, &conn),
        // No early return: both ends are closed below on every path.
        Ok(()) if case == 7 => accepted_end(f).map(|other| {
            f.record(conn.with_res(|_| other.with_res(|_| Ok(()))));
        }),
        _ => Ok(()),
    };
    // Up to 10 s for the answer and, once connected, the accepted connection.
    let answer = f
        .wait_until(10_000, |g| {
            g.answer.is_some() && (connected.is_err() || g.accepted.is_some())
        })
        .answer;
    let _ = conn.close_and_wait();
    // Stopping waits for a running connect request handler: nothing is
    // accepted after this, and what was is in `accepted`.
    l.stop();
    let (accepted, _active) = {
        let mut g = f.m.lock();
        (g.accepted.take(), g.active.take())
    };
    if let Some(c) = accepted {
        let _ = c.close_and_wait();
    }
    if let Err(e) = connected {
        pr_warn!("connecting to itself failed at {}: {:?}\n", e.step, e.err);
    }
    posted?;
    answer.ok_or(ETIMEDOUT)
}

/// The accepted end, once `accepted` has it (up to 10 s).
fn accepted_end(f: &Findings) -> Result<Arc<Conn<Peer>>> {
    f.wait_until(10_000, |g| g.accepted.is_some())
        .accepted
        .clone()
        .ok_or(ETIMEDOUT)
}

/// Case 5: once the accepted end is known, each end sends to the other.
fn cross_sends(f: &Findings, conn: &Arc<Conn<Peer>>) -> Result {
    let other = accepted_end(f)?;
    other.with_res(|res| res.post_send(1, 1, 0, 16))?;
    conn.with_res(|res| res.post_send(1, 1, 0, 16))
}

struct Misuse {
    _wq: rdma::WorkQueue,
}

impl kernel::Module for Misuse {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let wq = rdma::WorkQueue::new()?;
        let case = module_parameters::case.value();
        let Some(&Some((name, want))) = CASES.get(case as usize) else {
            pr_err!("case must be 0..{} but 2, not {}\n", CASES.len() - 1, case);
            return Err(EINVAL);
        };
        match commit(case) {
            Ok(Err(e)) if e == want => {
                pr_info!("case {} ({}): refused with {:?}\n", case, name, e);
                Ok(Self { _wq: wq })
            }
            Ok(r) => {
                pr_err!(
                    "case {} ({}): answered {:?}, not {:?}\n",
                    case,
                    name,
                    r,
                    want
                );
                Err(EINVAL)
            }
            Err(e) => {
                pr_err!("case {} ({}): not committed: {:?}\n", case, name, e);
                Err(EINVAL)
            }
        }
    }
}
