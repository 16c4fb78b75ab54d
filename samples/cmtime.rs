// SPDX-License-Identifier: GPL-2.0

//! cmtime: times each RDMA CM step over N connections, like rdma-core's `cmtime`.
//!
//! A sample of using cmecho's `rdma` layer the way a third-party ULP would: it
//! builds the layer from the same sources (`#[path]`), gives every connection its
//! parameters up front in `ConnParams`, and only calls the public API. At load it
//! makes `conns` connections to `addr`:`port` from the network namespace of the
//! loading process, disconnects and destroys them, and logs per step the wall
//! time the step took over all connections (`total`, and `per_conn` = total /
//! connections) and min/avg/max of one connection's part in it:
//!
//! ```text
//! ip netns exec b insmod cmecho_cmtime.ko addr=10.77.0.1 port=7174 conns=50
//! ip netns exec b insmod cmecho_cmtime.ko addr=10.77.0.1 conns=500 at_once=1
//! ```
//!
//! By default the connections run one after another. With `at_once=1` each
//! connection runs on its own work item and all of them are held at the start of
//! each step until every one has finished the step before, as rdma-core's
//! `cmtime` runs each step for all connections at once: `per_conn` is then
//! comparable with `cmtime`'s `us / conn`. The hold is the layer's optional
//! [`ConnHandler::before_step`] hook; a connection that is closed or loses its
//! device while held leaves at once. The module's workqueue runs up to 1024
//! items at a time, shared out among NUMA nodes: on a host of several nodes,
//! connections past the share of the loading CPU's node start only after the
//! others gave up waiting for them (120 s), and fail.
//!
//! Any RDMA CM listener works as the peer, e.g. a cmecho server endpoint.

#[path = "../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the sample uses part of the layer")]
mod rdma;

use core::sync::atomic::{AtomicI64, Ordering};
use kernel::new_condvar;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar, CondVarTimeoutResult, Mutex};
use kernel::time::{msecs_to_jiffies, Instant, Monotonic};
use rdma::params::AckTimeout;
use rdma::verbs::QpConfig;
use rdma::WcError;
use rdma::{Conn, ConnHandler, ConnParams, ConnectStep, EndReason, NetNs};

module! {
    type: CmTime,
    name: "cmecho_cmtime",
    authors: ["cmecho developers"],
    description: "Times RDMA CM steps through cmecho's Rust layer",
    license: "GPL",
    params: {
        port: u16 {
            default: 7174,
            description: "Port of the listener",
        },
        conns: u32 {
            default: 10,
            description: "Connections to time (1..1000)",
        },
        ack_timeout: u8 {
            default: 14,
            description: "Ack timeout exponent applied to every connection (0..31)",
        },
        at_once: bool {
            default: false,
            description: "Run each step for all connections at once, as rdma-core's cmtime does",
        },
    },
}

/// The C side's functions (`samples/cmtime.h`), as bindgen declares them (`Kbuild`).
#[allow(unreachable_pub, reason = "bindgen's output: `pub` items")]
mod c {
    use kernel::ffi;
    include!(env!("CMECHO_C_FFI"));
}

/// The steps timed, in order.
const STEPS: [&str; 7] = [
    "create_id",
    "resolve_addr",
    "resolve_route",
    "create_qp",
    "connect",
    "disconnect",
    "destroy",
];
/// Gate `k` starts step `k`; the last gate ends the last step.
const GATES: usize = STEPS.len() + 1;
const DISCONNECT: usize = 5;
const DESTROY: usize = 6;

/// How long a disconnect may take before the connection counts as failed.
const DISCONNECT_MS: u32 = 30_000;
/// How long a connection waits at a gate for the others (`at_once`) before it
/// gives up: longer than any step of the layer may take.
const GATE_MS: u32 = 120_000;
/// How often a connection waiting at a gate looks whether it is still open.
const GATE_SLICE_MS: u32 = 100;

/// Min, sum and max of one step, in µs.
#[derive(Clone, Copy)]
struct Acc {
    min: i64,
    sum: i64,
    max: i64,
}

impl Acc {
    const EMPTY: Self = Self {
        min: i64::MAX,
        sum: 0,
        max: 0,
    };

    fn add(&mut self, us: i64) {
        self.min = self.min.min(us);
        self.max = self.max.max(us);
        self.sum += us;
    }
}

/// The part of a [`Run`] its connections share, under [`Run::st`].
struct RunState {
    /// Connections still taking part: those that failed left.
    live: u32,
    /// Connections that reached each gate (and are still waiting at it, or
    /// passed it).
    arrived: [u32; GATES],
    /// When each gate opened (`at_once`): all live connections had reached it.
    opened: [Option<Instant<Monotonic>>; GATES],
    /// Connections done, successfully or not.
    finished: u32,
    /// Connections that went through every step.
    ok: u32,
    acc: [Acc; STEPS.len()],
}

/// One run of `conns` connections.
///
/// Lock order: `st`, then a connection's own lock (`Conn::is_open`, which a
/// connection waiting at a gate calls).
#[pin_data]
struct Run {
    net: NetNs,
    addr: &'static CStr,
    params: ConnParams,
    at_once: bool,
    /// The origin of the connections' [`Timed`] marks.
    base: Instant<Monotonic>,
    #[pin]
    st: Mutex<RunState>,
    #[pin]
    changed: CondVar,
}

impl Run {
    /// Opens every gate, in order, that all live connections have reached.
    fn open_ready(&self, g: &mut RunState) {
        for k in 0..GATES {
            if g.opened[k].is_some() {
                continue;
            }
            if g.live == 0 || g.arrived[k] < g.live {
                return;
            }
            g.opened[k] = Some(Instant::now());
            self.changed.notify_all();
        }
    }

    /// Waits at gate `k` until every live connection has reached it (`at_once`).
    ///
    /// Gives up with `ECONNABORTED` as soon as `open()` is false: a close or a
    /// device removal of the connection waits for `Connector::connect`, so for this
    /// hook, and must not wait for the others too.
    fn pass(&self, k: usize, open: impl Fn() -> bool) -> Result {
        let mut g = self.st.lock();
        g.arrived[k] += 1;
        self.open_ready(&mut g);
        let since = Instant::<Monotonic>::now();
        while g.opened[k].is_none() {
            let err = if !open() {
                ECONNABORTED
            } else if since.elapsed().as_millis() >= i64::from(GATE_MS) {
                ETIMEDOUT
            } else if let CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(GATE_SLICE_MS))
            {
                EINTR
            } else {
                continue;
            };
            g.arrived[k] -= 1;
            return Err(err);
        }
        Ok(())
    }

    /// A connection is done: `times` holds its steps in µs if all went well.
    fn finish(&self, times: Result<[i64; STEPS.len()]>) {
        let mut g = self.st.lock();
        match times {
            Ok(t) => {
                for (a, us) in g.acc.iter_mut().zip(t) {
                    a.add(us);
                }
                g.ok += 1;
            }
            Err(_) => {
                // The others no longer wait for it.
                g.live -= 1;
                self.open_ready(&mut g);
            }
        }
        g.finished += 1;
        self.changed.notify_all();
    }

    /// Waits until `n` connections are done.
    fn wait_finished(&self, n: u32) {
        let mut g = self.st.lock();
        while g.finished < n {
            // A pending signal must not make this spin: wait uninterruptibly
            // for the next connection then.
            if let CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(1000))
            {
                if g.finished < n {
                    self.changed.wait(&mut g);
                }
            }
        }
    }
}

/// The handler of a timed connection: it sends nothing, and marks when the
/// connection starts and ends each step.
struct Timed {
    run: Arc<Run>,
    /// Start and end of each step, in ns since [`Run::base`]; 0 until reached.
    start: [AtomicI64; STEPS.len()],
    end: [AtomicI64; STEPS.len()],
}

impl Timed {
    fn new(run: Arc<Run>) -> Self {
        Self {
            run,
            start: [const { AtomicI64::new(0) }; STEPS.len()],
            end: [const { AtomicI64::new(0) }; STEPS.len()],
        }
    }

    fn now(&self) -> i64 {
        self.run.base.elapsed().as_nanos()
    }

    /// Ends step `k - 1` and starts step `k` (gate [`STEPS`]`.len()` only ends
    /// the last); with `at_once`, waits in between for the other connections,
    /// until `conn` is no longer open (up to the disconnect, which ends that).
    fn gate(&self, k: usize, conn: &Conn<Self>) -> Result {
        if k > 0 {
            self.end[k - 1].store(self.now(), Ordering::Relaxed);
        }
        if self.run.at_once {
            self.run.pass(k, || k > DISCONNECT || conn.is_open())?;
        }
        if k < STEPS.len() {
            self.start[k].store(self.now(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Each step's duration in µs, rounded up.
    fn times(&self) -> [i64; STEPS.len()] {
        core::array::from_fn(|k| {
            let ns = self.end[k].load(Ordering::Relaxed) - self.start[k].load(Ordering::Relaxed);
            (ns + 999) / 1000
        })
    }
}

impl ConnHandler for Timed {
    fn setup(&self, _conn: &Conn<Self>) -> Result {
        Ok(())
    }
    fn completion(&self, _conn: &Conn<Self>, _tag: u32, _status: Result<u32, WcError>) {}
    fn established(&self, _conn: &Conn<Self>) {}
    fn ended(&self, _conn: &Conn<Self>, _reason: EndReason) {}
    fn endpoint_name(&self) -> &CStr {
        c"cmtime"
    }

    fn before_step(&self, conn: &Conn<Self>, step: ConnectStep) -> Result {
        let k = match step {
            ConnectStep::CreateId => 0,
            ConnectStep::ResolveAddr => 1,
            ConnectStep::ResolveRoute => 2,
            ConnectStep::CreateQp => 3,
            ConnectStep::Connect => 4,
        };
        self.gate(k, conn)
    }
}

/// Makes, disconnects and destroys one connection; returns its steps in µs.
fn time_one(run: &Arc<Run>) -> Result<[i64; STEPS.len()]> {
    let qp = QpConfig {
        ntags: 1,
        nbufs: 1,
        max_send_wr: 1,
        max_recv_wr: 1,
    };
    let connector = Conn::new_active(Ok::<_, Error>(Timed::new(run.clone())), run.params)?;
    let conn = connector.conn().clone();
    if let Err(e) = connector.connect(&run.net, run.addr, module_parameters::port.value(), qp) {
        pr_warn!("connect failed at {}: {:?}\n", e.step, e.err);
        return Err(e.err);
    }
    let h = conn.handler();
    if let Err(e) = h.gate(DISCONNECT, &conn) {
        // Best effort: the gate's error is the one to report.
        let _ = conn.close_and_wait();
        return Err(e);
    }
    // The DREP comes back within the CM's response timeout; a loaded guest
    // can take seconds. A disconnect that fails is reported, not swallowed.
    let disc = conn.disconnect_and_wait(DISCONNECT_MS);
    let destroy = h.gate(DESTROY, &conn);
    if let Err(e) = conn.close_and_wait() {
        pr_warn!("close failed: {:?}\n", e);
        return Err(e);
    }
    destroy?;
    if let Err(e) = disc {
        pr_warn!("disconnect failed at {}: {:?}\n", e.step, e.err);
        return Err(e.err);
    }
    h.gate(STEPS.len(), &conn)?;
    Ok(h.times())
}

struct CmTime {
    _wq: rdma::WorkQueue,
}

impl kernel::Module for CmTime {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let wq = rdma::WorkQueue::new()?;
        let n = module_parameters::conns.value();
        if !(1..=1000).contains(&n) {
            pr_err!("conns must be 1..1000, not {}\n", n);
            return Err(EINVAL);
        }
        let at_once = module_parameters::at_once.value();
        let params = ConnParams {
            ack_timeout: Some(AckTimeout::new(module_parameters::ack_timeout.value())?),
            ..ConnParams::default()
        };
        // SAFETY: `cmtime_addr` returns the module parameter's NUL-terminated buffer,
        // which lives as long as the module.
        let addr = unsafe { CStr::from_char_ptr(c::cmtime_addr()) };
        let run = Arc::pin_init(
            try_pin_init!(Run {
                net: NetNs::current()?,
                addr,
                params,
                at_once,
                base: Instant::now(),
                st <- new_mutex!(RunState {
                    live: n,
                    arrived: [0; GATES],
                    opened: [None; GATES],
                    finished: 0,
                    ok: 0,
                    acc: [Acc::EMPTY; STEPS.len()],
                }, "cmtime_run"),
                changed <- new_condvar!("cmtime_changed"),
            }),
            GFP_KERNEL,
        )?;
        let start = Instant::<Monotonic>::now();
        if at_once {
            for _ in 0..n {
                let r = run.clone();
                if let Err(e) = rdma::spawn(move || r.finish(time_one(&r))) {
                    run.finish(Err(e));
                }
            }
        } else {
            for _ in 0..n {
                run.finish(time_one(&run));
            }
        }
        run.wait_finished(n);
        let wall = start.elapsed();
        let g = run.st.lock();
        pr_info!(
            "{} of {} connections to {}:{} ok (netns {}, {}, {} ms)\n",
            g.ok,
            n,
            addr.to_str().unwrap_or("?"),
            module_parameters::port.value(),
            run.net.inum(),
            if at_once {
                "all at once"
            } else {
                "one after another"
            },
            wall.as_millis()
        );
        if g.ok > 0 {
            let ok = i64::from(g.ok);
            for (k, (name, a)) in STEPS.iter().zip(g.acc).enumerate() {
                // One after another, a step's wall time is the sum of its parts;
                // all at once, the time from its gate's opening to the next's.
                let total = match (at_once, g.opened[k], g.opened[k + 1]) {
                    (false, ..) => a.sum,
                    (true, Some(s), Some(e)) => (e - s).as_micros_ceil(),
                    (true, ..) => continue,
                };
                pr_info!(
                    "step {} total {} per_conn {} min {} avg {} max {} us\n",
                    name,
                    total,
                    total / ok,
                    a.min,
                    a.sum / ok,
                    a.max
                );
            }
        }
        drop(g);
        Ok(Self { _wq: wq })
    }
}
