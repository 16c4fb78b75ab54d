// SPDX-License-Identifier: GPL-2.0

//! The endpoint's lifecycle: enabling and disabling it, the listener and the
//! connections it keeps, and what they report to it.
//!
//! # Lock order
//!
//! Outermost first; a lock may be taken while holding only locks above it. The
//! names are the lockdep classes.
//!
//! 1. `Endpoint::ctl` (`cmecho_ep_ctl`): `enable` writes and the directory's
//!    removal. No CM handler or completion takes it, so it may be held while
//!    waiting for listeners and connections to go.
//! 2. The CM's handler mutex of an id, and a CQ's completion work: where the
//!    service's callbacks run (see `crate::rdma::conn`).
//! 3. A connection's ULP state: `cmecho_native_srv_st`, `cmecho_native_cli_st`,
//!    `cmecho_rping_cli_progress`, `cmecho_rping_srv_progress`. Never two at once.
//! 4. `Shared::inner` (`cmecho_shared_inner`): the endpoint's state, stats and
//!    connection list. Calls into a connection's state below it, never into a
//!    ULP state above it.
//! 5. The `rdma` layer's own locks, `cmecho_conn_res` (held while a
//!    `Conn::with_res` closure runs: the echo service's closures only post and
//!    copy), `cmecho_conn_inner` and `cmecho_listener_inner`, which nest with
//!    nothing of cmecho's, and `cmecho_timer_handler`, the spinlock of the
//!    endpoint's timer (a server's accept deadline, the connections' watch),
//!    taken when it is armed.
//! 6. Spinlocks with interrupts off, taken in the CQ's softirq too (a fast
//!    path, `ConnHandler::fast_completion`), innermost: nothing is taken
//!    under them, and they may be taken under any of the above, and under
//!    the QP resources a fast path holds. A native echo connection's
//!    `cmecho_native_srv_hot` or `cmecho_native_cli_hot`, then, never
//!    within one of those, `cmecho_shared_rtt` (the endpoint's round trips).
//!
//! No lock of 1 to 5 is held across a call that destroys a listener or a
//! connection (`Listener::stop`, `Conn::close_and_wait`): those wait for the
//! CM's handlers and free CQs (waiting for their completion work), which take
//! locks 3 to 5. `Shared::inner` is not
//! held while a `Run` that holds a listener is dropped, for the same reason,
//! nor while the endpoint's timer is disarmed: that waits for its `fire`,
//! which takes `Shared::inner`. The connections' watch calls into each
//! connection's ULP state with no lock held.

mod conns;
mod erased;
mod report;

pub(super) use conns::spawn_connect;
pub(crate) use erased::{ConnView, EchoConn, EpListener};
pub(crate) use report::ErrName;

use erased::EpConn;
use report::set_error;

use super::admission;
use super::config::{Addr, Config, Role};
use super::error_text::ErrorText;
use super::limits::Refusal;
use super::stats::{ReadBack, Rtt, RttSamples, Stats, StatsReading};
use crate::rdma::params::Ece;
use crate::rdma::verbs::QpConfig;
use crate::rdma::{
    Conn, ConnState, ConnectRequest, NetNs, RejectReason, StepError, Timer, TimerHandler,
};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::fmt;
use kernel::prelude::*;
use kernel::str::CString;
use kernel::sync::{new_condvar, new_mutex, new_spinlock_irq, Arc, CondVar, Mutex, SpinLockIrq};
use kernel::time::{msecs_to_jiffies, Delta, Instant, Monotonic};

/// An endpoint's state, as `state` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Not enabled.
    Idle,
    /// A server that listens.
    Listening,
    /// A client setting up its connections.
    Connecting,
    /// A client with a connection established (its clients ping once all
    /// are connected or failed).
    Running,
    /// A client that completed every ping.
    Done,
    /// Failed; `last_error` says why.
    Error,
}

/// A connection an endpoint keeps.
struct Kept {
    conn: Arc<dyn EpConn>,
    /// A server's connection until it is seen established: when it was
    /// accepted, for `accept_timeout_ms`.
    accepted: Option<Instant<Monotonic>>,
    /// A client's connection that is connected and waits for the endpoint's
    /// other clients to be connected (or failed) before its messages start.
    ready: bool,
}

/// The running parts of an enabled endpoint.
struct Run {
    /// A server's listener.
    listener: Option<Arc<dyn EpListener>>,
    /// Accepted (server) or opened (client) connections.
    conns: KVec<Kept>,
}

impl Run {
    const fn new() -> Self {
        Self {
            listener: None,
            conns: KVec::new(),
        }
    }

    /// Forgets connections that have closed.
    fn prune(&mut self) {
        self.conns.retain(|k| k.conn.state() != ConnState::Closed);
    }

    /// How many connections are established.
    fn established(&self) -> usize {
        self.conns
            .iter()
            .filter(|k| k.conn.state() == ConnState::Established)
            .count()
    }
}

/// An endpoint's mutable state, protected by [`Shared::inner`].
struct Inner {
    cfg: Config,
    enabled: bool,
    state: State,
    last_error: ErrorText,
    stats: Stats,
    read_back: Option<ReadBack>,
    run: Run,
    /// Client connection setups still running on the workqueue, the enabling
    /// loop counting as one until it spawned every client, and the last setup
    /// as one until it started every ready client ([`Shared::setup_done`]).
    setups: u32,
    /// Client connections that have not finished their pings yet.
    unfinished: u32,
    /// An enable or disable is under way (it may drop the lock meanwhile).
    changing: bool,
    /// The endpoint's timer is armed or its `fire` is about to run: a newly
    /// kept (server) or connected (client) connection is then seen by that
    /// `fire`, which arms the timer again for what is left.
    reaper_armed: bool,
}

/// The part of an endpoint its connections share.
#[pin_data]
pub(crate) struct Shared {
    name: CString,
    net: NetNs,
    #[pin]
    inner: Mutex<Inner>,
    #[pin]
    changed: CondVar,
    /// The round trips behind `stats`' `rtt_*` and percentiles: recorded by
    /// client completions, which may run in the CQ's softirq, so under a
    /// `SpinLockIrq`, taken last (after `inner` where both are held).
    #[pin]
    rtt: SpinLockIrq<Rtt>,
    /// A server's accept deadline, armed while an accepted connection is not
    /// established, and the connections' watch, armed while one wants it
    /// ([`EchoConn::tick`]). Disarmed by `stop`.
    reaper: Arc<Timer<Shared>>,
    /// The bytes and messages the connections' fast paths echoed, in the
    /// CQ's softirq, where `inner` cannot be taken: added to `stats.bytes`
    /// and `stats.pings` when they are read ([`Shared::fast_stats`]).
    fast_bytes: AtomicU64,
    fast_pings: AtomicU64,
}

/// One cmecho endpoint: a configfs directory.
///
/// Lock order (see the module documentation): `ctl` before `Shared::inner`.
/// `ctl` is only taken by configfs writes to `enable` and by the directory's
/// removal, never by a CM or completion handler, so waiting for connections
/// while holding it is fine.
#[pin_data(PinnedDrop)]
pub(crate) struct Endpoint {
    /// Its debugfs files; removed first.
    _debugfs: crate::debugfs::EndpointFiles,
    shared: Arc<Shared>,
    /// Serializes enable, disable and removal: each runs to its end before the
    /// next starts, so two enables cannot both start a listener.
    #[pin]
    ctl: Mutex<()>,
}

impl Endpoint {
    /// Creates an endpoint named `name` in the network namespace of the caller,
    /// with its debugfs files under `debugfs`.
    pub(crate) fn new(
        name: &CStr,
        debugfs: &crate::debugfs::Root,
    ) -> Result<impl PinInit<Self, Error>> {
        let shared = Arc::pin_init(
            try_pin_init!(Shared {
                name: CString::try_from(name)?,
                net: NetNs::current()?,
                inner <- new_mutex!(Inner {
                    cfg: Config::default(),
                    enabled: false,
                    state: State::Idle,
                    last_error: ErrorText::new(),
                    stats: Stats::default(),
                    read_back: None,
                    run: Run::new(),
                    setups: 0,
                    unfinished: 0,
                    changing: false,
                    reaper_armed: false,
                }, "cmecho_shared_inner"),
                changed <- new_condvar!("cmecho_shared_changed"),
                rtt <- new_spinlock_irq!(Rtt::new(), "cmecho_shared_rtt"),
                reaper: Timer::new()?,
                fast_bytes: AtomicU64::new(0),
                fast_pings: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )?;
        let debugfs = debugfs.endpoint(name, shared.clone())?;
        Ok(try_pin_init!(Self {
            _debugfs: debugfs,
            shared,
            ctl <- new_mutex!((), "cmecho_ep_ctl"),
        }))
    }

    /// Runs `f` on the configuration if the endpoint is not enabled.
    ///
    /// `f` either changes the configuration or returns an error message, in which
    /// case nothing changed. The error becomes `last_error`; a change while enabled
    /// fails with `EBUSY`, as does one while an enable or disable is under way.
    pub(crate) fn configure(
        &self,
        attr: &str,
        f: impl FnOnce(&mut Config) -> Result<(), Refusal>,
    ) -> Result {
        let mut g = self.shared.inner.lock();
        if g.enabled {
            set_error(&mut g, fmt!("{}: cannot change while enabled", attr));
            return Err(EBUSY);
        }
        if g.changing {
            set_error(
                &mut g,
                fmt!(
                    "{}: cannot change while the endpoint is being enabled or disabled",
                    attr
                ),
            );
            return Err(EBUSY);
        }
        let mut cfg = g.cfg;
        match f(&mut cfg) {
            Ok(()) => {
                g.cfg = cfg;
                Ok(())
            }
            Err(msg) => {
                set_error(&mut g, fmt!("{}: {}", attr, msg));
                Err(EINVAL)
            }
        }
    }

    /// Records a bad value for `attr` in `last_error`; returns `EINVAL`.
    pub(crate) fn invalid(&self, attr: &str, msg: &str) -> Error {
        set_error(&mut self.shared.inner.lock(), fmt!("{}: {}", attr, msg));
        EINVAL
    }

    /// Whether `a` is one address, its scope (if any) an interface of the
    /// endpoint's network namespace.
    pub(crate) fn valid_addr(&self, a: &Addr) -> bool {
        self.shared.net.valid_addr(a.as_cstr())
    }

    /// Reads the configuration.
    pub(crate) fn config<R>(&self, f: impl FnOnce(&Config) -> R) -> R {
        f(&self.shared.inner.lock().cfg)
    }

    /// Whether the endpoint is enabled.
    pub(crate) fn enabled(&self) -> bool {
        self.shared.inner.lock().enabled
    }

    /// Enables or disables the endpoint, one change at a time.
    pub(crate) fn set_enabled(&self, on: bool) -> Result {
        let _ctl = self.ctl.lock();
        if on {
            self.enable()
        } else {
            self.shared.stop();
            Ok(())
        }
    }

    fn enable(&self) -> Result {
        let sh = &self.shared;
        let mut g = sh.inner.lock();
        if g.enabled {
            set_error(&mut g, fmt!("enable: already enabled"));
            return Err(EBUSY);
        }
        // The RTT samples' room, allocated without the lock and only once, so that
        // recording them in a completion handler never allocates. Nothing records
        // meanwhile: the endpoint is not enabled, and `ctl` keeps other enables out;
        // `changing` keeps attribute writes (a change of role) out meanwhile.
        let client = g.cfg.role == Role::Client;
        let mut room = core::mem::replace(&mut sh.rtt.lock().samples, RttSamples::new());
        g.changing = true;
        drop(g);
        let reserved = if client { room.reserve() } else { Ok(()) };
        let mut g = sh.inner.lock();
        g.changing = false;
        sh.rtt.lock().samples = room;
        if reserved.is_err() {
            set_error(
                &mut g,
                fmt!("enable: cannot allocate room for the RTT samples"),
            );
            return Err(ENOMEM);
        }
        let Some(addr) = g.cfg.addr else {
            set_error(&mut g, fmt!("enable: addr is not set"));
            return Err(EINVAL);
        };
        let cfg = g.cfg;
        if let Err(e) = admission::enable_fits(&cfg) {
            set_error(&mut g, fmt!("enable: {}", e));
            return Err(EINVAL);
        }
        g.stats = Stats::default();
        self.shared.fast_bytes.store(0, Ordering::Relaxed);
        self.shared.fast_pings.store(0, Ordering::Relaxed);
        self.shared.rtt.lock().reset();
        g.read_back = None;
        g.last_error.clear();
        match cfg.role {
            Role::Server => {
                // Listening sleeps: `changing` keeps attribute writes out meanwhile.
                g.changing = true;
                drop(g);
                let listening = (cfg.mode.ops().listen)(sh, &cfg, &addr);
                match listening {
                    Ok(listener) => {
                        let mut g = sh.inner.lock();
                        g.changing = false;
                        // Lock order: `Shared::inner`, then the listener's own.
                        if !listener.is_listening() {
                            // Its device went away as it started listening
                            // (`listener_removed` has said so): not enabled.
                            g.state = State::Error;
                            return Err(ENODEV);
                        }
                        g.run = Run {
                            listener: Some(listener),
                            conns: KVec::new(),
                        };
                        g.enabled = true;
                        g.state = State::Listening;
                        Ok(())
                    }
                    Err(e) => {
                        let mut g = sh.inner.lock();
                        g.changing = false;
                        g.state = State::Error;
                        set_error(
                            &mut g,
                            fmt!(
                                "enable: {}: {} on {}:{}",
                                e.step,
                                ErrName(e.err),
                                addr.as_str(),
                                cfg.port
                            ),
                        );
                        Err(e.err)
                    }
                }
            }
            Role::Client => {
                g.run = Run::new();
                g.enabled = true;
                g.state = State::Connecting;
                g.unfinished = cfg.clients;
                // The loop's own setup: no client starts before all are spawned.
                g.setups += 1;
                drop(g);
                for i in 0..cfg.clients {
                    if let Err(e) = (cfg.mode.ops().start)(sh, &cfg, &addr, i) {
                        let mut g = sh.inner.lock();
                        g.stats.errors += 1;
                        g.unfinished = g.unfinished.saturating_sub(1);
                        set_error(&mut g, fmt!("client {}: cannot start: {}", i, ErrName(e)));
                        g.state = State::Error;
                    }
                }
                sh.setup_done();
                Ok(())
            }
        }
    }

    /// The endpoint's state.
    pub(crate) fn state(&self) -> State {
        self.shared.inner.lock().state
    }

    /// Reads the stats, and copies the RTT samples for percentiles computed
    /// without the lock.
    pub(crate) fn read_stats(&self) -> StatsReading {
        // The room for a copy of the samples is made before the lock is taken
        // for the snapshot: completions take that lock on every echo. Samples
        // recorded in between are left out of this reading.
        let kept = self.shared.rtt.lock().samples.len();
        let mut samples = KVVec::with_capacity(kept, GFP_KERNEL);
        let g = self.shared.inner.lock();
        let mut stats = g.stats;
        stats.bytes += self.shared.fast_bytes.load(Ordering::Relaxed);
        stats.softirq_pings = self.shared.fast_pings.load(Ordering::Relaxed);
        stats.pings += stats.softirq_pings;
        let active = g.run.established();
        self.shared.rtt.lock().summary_into(&mut stats);
        // A part at a time: completions in softirq record under that lock.
        // A part may be of samples recorded after the summary.
        if let Ok(v) = samples.as_mut() {
            while self.shared.rtt.lock().samples.copy_more(v, 4096) {}
        }
        drop(g);
        StatsReading {
            stats,
            active,
            samples,
        }
    }

    /// What the QP of the last established connection got.
    pub(crate) fn read_back(&self) -> Option<ReadBack> {
        self.shared.inner.lock().read_back
    }

    /// The endpoint's connections, copied so that they are shown without the lock
    /// (as many as there is memory for).
    pub(crate) fn connections(&self) -> KVec<Arc<dyn ConnView>> {
        self.shared.connections()
    }

    /// Runs `f` on `last_error`, under the lock.
    pub(crate) fn last_error<R>(&self, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(self.shared.inner.lock().last_error.get())
    }

    /// The inode number of the endpoint's network namespace.
    pub(crate) fn netns_inum(&self) -> u32 {
        self.shared.net.inum()
    }
}

#[pinned_drop]
impl PinnedDrop for Endpoint {
    fn drop(self: Pin<&mut Self>) {
        let _ctl = self.ctl.lock();
        self.shared.stop();
    }
}

impl Shared {
    /// The network namespace the endpoint was made in.
    pub(in crate::echo) fn net(&self) -> &NetNs {
        &self.net
    }
}
