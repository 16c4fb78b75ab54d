// SPDX-License-Identifier: GPL-2.0

//! misuse: a third-party ULP doing what cmecho's `rdma` layer must refuse.
//!
//! Each misuse is a call the layer's safe API allows to be written; none may hang,
//! leak or corrupt anything: the layer refuses it with an errno and the connection
//! carries on. At load the sample listens on `addr`:`port`, connects to itself
//! there, commits misuse `case`, closes everything and logs the answer:
//!
//! - 0: `close_and_wait` from the passive side's `setup` (the request's CM handler),
//! - 1: `close_and_wait` from `accepted` (the same handler),
//! - 2: `connect` on an accepted connection,
//! - 3: `close_and_wait` from a completion of the connection's own CQ.
//!
//! ```text
//! ip netns exec a insmod cmecho_misuse.ko addr=10.77.0.1 port=7190 case=3
//! ```
//!
//! Load fails with `EINVAL` unless the misuse was refused with the expected errno.

#[path = "../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the sample uses part of the layer")]
mod rdma;

use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::msecs_to_jiffies;
use rdma::cm::{
    Conn, ConnHandler, ConnParams, ConnectRequest, EndReason, ListenHandler, Listener, NetNs,
    RejectReason, StepError,
};
use rdma::params::Ece;
use rdma::verbs::{QpConfig, WcError};

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
            description: "The misuse: 0 setup, 1 accepted, 2 connect, 3 completion",
        },
    },
}

extern "C" {
    fn misuse_addr() -> *const kernel::ffi::c_char;
}

/// The misuses, by `case`: name and the errno the layer must answer with.
const CASES: [(&str, Error); 4] = [
    ("close_and_wait in setup", EDEADLK),
    ("close_and_wait in accepted", EDEADLK),
    ("connect on an accepted connection", EINVAL),
    ("close_and_wait in a completion", EDEADLK),
];

const QP: QpConfig = QpConfig {
    ntags: 1,
    nbufs: 1,
    max_send_wr: 1,
    max_recv_wr: 1,
};

/// What the misuse returned, and the accepted connection (the sample's to close).
struct Found {
    answer: Option<Result>,
    accepted: Option<Arc<Conn<Peer>>>,
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
        if self.passive {
            conn.with_res(|res| res.post_recv(0, 0, 0, 16))?;
            if self.case == 0 {
                self.f.record(conn.close_and_wait());
            }
        }
        Ok(())
    }

    fn completion(&self, conn: &Conn<Self>, _tag: u32, status: Result<u32, WcError>) {
        if !self.passive && self.case == 3 && status.is_ok() {
            self.f.record(conn.close_and_wait());
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

impl ListenHandler for Server {
    type Conn = Peer;

    fn qp_config(&self) -> QpConfig {
        QP
    }

    fn connect_request(
        &self,
        _req: &ConnectRequest,
    ) -> Result<(impl PinInit<Peer, Error>, Option<Ece>), RejectReason> {
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
            2 => {
                let port = module_parameters::port.value();
                let r = conn.connect(&self.net, self.addr, port, QP);
                Some(r.map_err(|e: StepError| e.err))
            }
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
    let addr = unsafe { CStr::from_char_ptr(misuse_addr()) };
    let port = module_parameters::port.value();
    let f = Arc::pin_init(
        pin_init!(Findings {
            m <- new_mutex!(Found { answer: None, accepted: None }, "misuse_found"),
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
    let l = Listener::listen(&net, addr, port, ConnParams::rping(), server)?;
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
    let conn = Conn::new_active(Ok::<_, Error>(peer), ConnParams::rping())?;
    let connected = conn.connect(net, addr, module_parameters::port.value(), QP);
    let posted = match connected {
        Ok(()) if case == 3 => conn.with_res(|res| res.post_send(0, 0, 0, 16)),
        _ => Ok(()),
    };
    // Up to 10 s for the answer and, once connected, the accepted connection.
    let answer = {
        let mut g = f.m.lock();
        let mut left = msecs_to_jiffies(10_000);
        while (g.answer.is_none() || (connected.is_ok() && g.accepted.is_none())) && left > 0 {
            left = match f.cv.wait_interruptible_timeout(&mut g, left) {
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => jiffies,
                _ => 0,
            };
        }
        g.answer
    };
    let _ = conn.close_and_wait();
    // Stopping waits for a running connect request handler: nothing is
    // accepted after this, and what was is in `accepted`.
    l.stop();
    let accepted = f.m.lock().accepted.take();
    if let Some(c) = accepted {
        let _ = c.close_and_wait();
    }
    if let Err(e) = connected {
        pr_warn!("connecting to itself failed at {}: {:?}\n", e.step, e.err);
    }
    posted?;
    answer.ok_or(ETIMEDOUT)
}

struct Misuse {
    _wq: rdma::WorkQueue,
}

impl kernel::Module for Misuse {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let wq = rdma::WorkQueue::new()?;
        let case = module_parameters::case.value();
        let Some(&(name, want)) = CASES.get(case as usize) else {
            pr_err!("case must be 0..{}, not {}\n", CASES.len() - 1, case);
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
