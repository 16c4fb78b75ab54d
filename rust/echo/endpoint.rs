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
//!    accept deadline's timer, taken when it is armed.
//!
//! No lock of 1 to 5 is held across a call that destroys a listener or a
//! connection (`Listener::stop`, `Conn::close_and_wait`): those wait for the
//! CM's handlers and drain CQs, which take locks 3 to 5. `Shared::inner` is not
//! held while a `Run` that holds a listener is dropped, for the same reason,
//! nor while the accept deadline's timer is disarmed: that waits for its
//! `fire`, which takes `Shared::inner`.

use super::admission;
use super::config::{Addr, Config, Mode, Role};
use super::error_text::ErrorText;
use super::hello::Refused;
use super::stats::{ConnCounters, ReadBack, RttSamples, Stats, StatsReading};
use super::{client, native, server};
use crate::rdma::params::{Ece, PrivateData};
use crate::rdma::verbs::{QpAttrs, QpConfig};
use crate::rdma::{
    Conn, ConnHandler, ConnState, ConnectRequest, Listener, NetNs, RejectReason, StepError, Timer,
    TimerHandler,
};
use kernel::fmt;
use kernel::prelude::*;
use kernel::str::CString;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
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

/// What the echo service needs of each connection handler, whatever its protocol.
pub(crate) trait EchoConn: ConnHandler {
    /// Marks a client connection whose setup failed as finished.
    fn setup_failed(&self);
    /// The connection's counters.
    fn counters(&self) -> ConnCounters;
    /// What the peer's reject says, in the ULP's terms, where the handler can
    /// read its private data (untrusted: `None` for anything else).
    fn explain_reject(&self, _data: &PrivateData) -> Option<Refused> {
        None
    }
    /// A client's connect succeeded, and so did or failed those of the
    /// endpoint's other clients: runs in process context and outside any
    /// callback, on the task of the last setup to end (a client task, or the
    /// enabling writer), unless the endpoint was disabled first; the
    /// connection may have ended meanwhile. Where a client posts its first
    /// batch: not in the CM's `ESTABLISHED` handler, which holds the id's
    /// handler mutex and the CM's worker.
    fn connected(&self, _conn: &Conn<Self>) {}
}

/// What `connections` shows of a connection an endpoint keeps, whatever its
/// handler type.
pub(crate) trait ConnView: Send + Sync {
    /// The connection's state.
    fn state(&self) -> ConnState;
    /// Its handler's counters.
    fn counters(&self) -> ConnCounters;
    /// The peer's address, written into `buf`, while the connection has one.
    fn peer<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str>;
    /// What its QP got.
    fn qp_attrs(&self) -> Result<QpAttrs>;
}

impl<H: EchoConn> ConnView for Conn<H> {
    fn state(&self) -> ConnState {
        Conn::state(self)
    }

    fn counters(&self) -> ConnCounters {
        self.handler().counters()
    }

    fn peer<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str> {
        Conn::peer(self, buf)
    }

    fn qp_attrs(&self) -> Result<QpAttrs> {
        Conn::qp_attrs(self)
    }
}

/// A connection an endpoint keeps, whatever its handler type.
trait EpConn: ConnView {
    /// [`Conn::peer_answered`].
    fn peer_answered(&self) -> bool;
    fn close(&self);
    fn close_and_wait(&self);
    /// [`EchoConn::connected`]: the client's messages start.
    fn start(&self);
    /// The same connection, seen only as a [`ConnView`] (no trait upcasting:
    /// it needs a newer compiler than the kernel's minimum).
    fn as_view(self: Arc<Self>) -> Arc<dyn ConnView>;
}

impl<H: EchoConn> EpConn for Conn<H> {
    fn peer_answered(&self) -> bool {
        Conn::peer_answered(self)
    }

    fn close(&self) {
        Conn::close(self)
    }

    fn close_and_wait(&self) {
        // Only fails inside a callback of the rdma layer or a `with_res`
        // closure; endpoints call this from process context.
        let _ = Conn::close_and_wait(self);
    }

    fn start(&self) {
        self.handler().connected(self)
    }

    fn as_view(self: Arc<Self>) -> Arc<dyn ConnView> {
        self
    }
}

/// A listener an endpoint keeps, whatever its handler type.
trait EpListener: Send + Sync {
    fn stop(&self);
    fn is_listening(&self) -> bool;
}

impl<L: crate::rdma::ListenHandler> EpListener for Listener<L> {
    fn stop(&self) {
        Listener::stop(self)
    }

    fn is_listening(&self) -> bool {
        Listener::is_listening(self)
    }
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
    /// The round-trip times behind `stats`' percentiles.
    rtt: RttSamples,
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
    /// The accept deadline's timer is armed or its `fire` is about to run: a
    /// newly kept connection is then seen by that `fire`, which arms the
    /// timer again for what is left.
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
    /// A server's accept deadline: armed while an accepted connection is not
    /// established, disarmed by `stop`.
    reaper: Arc<Timer<Shared>>,
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
                    rtt: RttSamples::new(),
                    read_back: None,
                    run: Run::new(),
                    setups: 0,
                    unfinished: 0,
                    changing: false,
                    reaper_armed: false,
                }, "cmecho_shared_inner"),
                changed <- new_condvar!("cmecho_shared_changed"),
                reaper: Timer::new()?,
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
        f: impl FnOnce(&mut Config) -> Result<(), &'static str>,
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
        let mut room = core::mem::replace(&mut g.rtt, RttSamples::new());
        g.changing = true;
        drop(g);
        let reserved = if client { room.reserve() } else { Ok(()) };
        let mut g = sh.inner.lock();
        g.changing = false;
        g.rtt = room;
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
        g.rtt.reset();
        g.read_back = None;
        g.last_error.clear();
        match cfg.role {
            Role::Server => {
                // Listening sleeps: `changing` keeps attribute writes out meanwhile.
                g.changing = true;
                drop(g);
                let (a, p, params) = (addr.as_cstr(), cfg.port, cfg.conn_params());
                let listening: Result<Arc<dyn EpListener>, StepError> = match cfg.mode {
                    Mode::Rping => {
                        Listener::listen(&sh.net, a, p, params, server::Listen::new(sh.clone()))
                            .map(|l| l as Arc<dyn EpListener>)
                    }
                    Mode::Echo => Listener::listen(
                        &sh.net,
                        a,
                        p,
                        params,
                        native::Listen::new(sh.clone(), &cfg),
                    )
                    .map(|l| l as Arc<dyn EpListener>),
                };
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
                    let started = match cfg.mode {
                        Mode::Rping => client::start(sh, &cfg, &addr, i),
                        Mode::Echo => native::start(sh, &cfg, &addr, i),
                    };
                    if let Err(e) = started {
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
        let kept = self.shared.inner.lock().rtt.len();
        let mut samples = KVVec::with_capacity(kept, GFP_KERNEL);
        let g = self.shared.inner.lock();
        let stats = g.stats;
        let active = g.run.established();
        if let Ok(v) = samples.as_mut() {
            g.rtt.copy_into(v);
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
    /// The endpoint's connections, copied so that they are shown without the lock
    /// (as many as there is memory for).
    pub(crate) fn connections(&self) -> KVec<Arc<dyn ConnView>> {
        let g = self.inner.lock();
        let mut v = KVec::new();
        for k in g.run.conns.iter() {
            if v.push(k.conn.clone().as_view(), GFP_KERNEL).is_err() {
                break;
            }
        }
        drop(g);
        v
    }

    /// The endpoint's name, for messages.
    fn name(&self) -> &str {
        self.name.to_str().unwrap_or("?")
    }

    /// Records an error: counts it, makes it `last_error`, logs it unless the
    /// rate limit refuses (most errors are a peer's doing, and a peer may
    /// repeat them in a loop), in which case it counts it as suppressed.
    pub(super) fn error(&self, msg: fmt::Arguments<'_>) {
        let mut g = self.inner.lock();
        g.stats.errors += 1;
        set_error(&mut g, msg);
        if crate::rdma::log_ratelimit() {
            pr_warn!("{}: {}\n", self.name(), msg);
        } else {
            g.stats.logs_suppressed += 1;
        }
    }

    /// Records a failed connection setup; `why` is what the peer's reject
    /// said, where the handler could read it.
    pub(super) fn step_error(
        &self,
        who: fmt::Arguments<'_>,
        e: &StepError,
        why: Option<&dyn fmt::Display>,
    ) {
        self.stats(|s| {
            s.connect_failed += 1;
            if e.err == ECONNREFUSED {
                s.rejected += 1;
            }
        });
        match e.status {
            Some(st) if e.err == ECONNREFUSED => self.error(fmt!(
                "{}: {}: rejected by the peer: {} (reason {}){}{}",
                who,
                e.step,
                e.reject_msg.and_then(|m| m.to_str().ok()).unwrap_or("?"),
                st,
                if why.is_some() { ": " } else { "" },
                why.unwrap_or(&""),
            )),
            Some(st) if e.attempts > 1 => self.error(fmt!(
                "{}: {} (status {}) after {} attempts",
                who,
                e.step,
                st,
                e.attempts
            )),
            Some(st) => self.error(fmt!("{}: {} (status {})", who, e.step, st)),
            None => self.error(fmt!("{}: {}: {}", who, e.step, ErrName(e.err))),
        }
    }

    /// Sets `last_error` without counting an error.
    pub(super) fn set_last_error(&self, msg: fmt::Arguments<'_>) {
        set_error(&mut self.inner.lock(), msg);
    }

    pub(super) fn stats(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.inner.lock().stats);
    }

    /// Updates the stats with `f` and records a round-trip time, under one lock.
    pub(super) fn stats_rtt(&self, rtt: Option<Delta>, f: impl FnOnce(&mut Stats)) {
        let mut g = self.inner.lock();
        f(&mut g.stats);
        if let Some(d) = rtt {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(0);
            g.stats.record_rtt(ns);
            g.rtt.record(ns);
        }
    }

    /// Captures what the QP of a just-established connection got.
    pub(super) fn read_back<H: crate::rdma::ConnHandler>(&self, conn: &Conn<H>) {
        if let Some(rb) = ReadBack::of(conn) {
            self.inner.lock().read_back = Some(rb);
        }
    }

    /// Stops everything and waits: the listener, every connection, every setup.
    fn stop(&self) {
        let run = {
            let mut g = self.inner.lock();
            g.enabled = false;
            g.changing = true;
            g.reaper_armed = false;
            core::mem::replace(&mut g.run, Run::new())
        };
        // Not enabled any more: nothing arms the deadline again.
        self.reaper.disarm_sync();
        // No new connections first, then close the ones there are.
        if let Some(l) = &run.listener {
            l.stop();
        }
        close_all(&run.conns);
        // Client setups still on the workqueue see `enabled == false` and give up;
        // wait for them, and close what they registered meanwhile.
        let mut g = self.inner.lock();
        while g.setups > 0 {
            // A pending signal must not make this spin: wait uninterruptibly
            // for the setup's wake-up then.
            if let kernel::sync::CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(100))
            {
                if g.setups > 0 {
                    self.changed.wait(&mut g);
                }
            }
        }
        let late = core::mem::replace(&mut g.run, Run::new());
        drop(g);
        close_all(&late.conns);
        let mut g = self.inner.lock();
        g.state = State::Idle;
        g.changing = false;
    }

    /// Keeps a connection, unless the endpoint is disabled or out of memory, in
    /// which case it is closed. A server's (`accepted`) is closed unless it is
    /// established within `accept_timeout_ms`.
    fn keep<H: EchoConn>(self: &Arc<Self>, conn: Arc<Conn<H>>, accepted: bool) -> Result {
        let mut g = self.inner.lock();
        if g.enabled {
            g.run.prune();
            let kept = Kept {
                conn: conn.clone(),
                accepted: accepted.then(Instant::now),
                ready: false,
            };
            if g.run.conns.push(kept, GFP_KERNEL).is_ok() {
                if accepted && !g.reaper_armed {
                    g.reaper_armed = self
                        .reaper
                        .arm(self.clone(), g.cfg.accept_timeout_ms.min(REAPER_TICK_MS));
                }
                return Ok(());
            }
        }
        drop(g);
        conn.close();
        Err(ECONNABORTED)
    }

    /// A client's connection is connected: it starts with the others, once no
    /// setup of the endpoint runs any more ([`Shared::setup_done`]).
    fn connected(&self, conn: &Arc<dyn EpConn>) {
        let mut g = self.inner.lock();
        let me = Arc::as_ptr(conn);
        if let Some(k) = g
            .run
            .conns
            .iter_mut()
            .find(|k| core::ptr::addr_eq(Arc::as_ptr(&k.conn), me))
        {
            k.ready = true;
        }
    }

    /// A client setup ended (connected, failed, or given up): the last one of
    /// an enabled endpoint starts every connected client, so that an endpoint's
    /// clients connect without their own messages in the way (on one host they
    /// share the CPUs with the CM's handshakes) and then run side by side. It
    /// counts in `setups` until it is done, so a disable waits for it.
    fn setup_done(&self) {
        loop {
            let next = {
                let mut g = self.inner.lock();
                let next = if g.setups == 1 && g.enabled {
                    g.run.conns.iter_mut().find(|k| k.ready).map(|k| {
                        k.ready = false;
                        k.conn.clone()
                    })
                } else {
                    None
                };
                if next.is_none() {
                    g.setups = g.setups.saturating_sub(1);
                }
                next
            };
            match next {
                Some(c) => c.start(),
                None => break,
            }
        }
        self.changed.notify_all();
    }

    /// A server accepted a connection: counts and keeps it (on failure `keep` has
    /// closed it).
    pub(super) fn accepted<H: EchoConn>(self: &Arc<Self>, conn: Arc<Conn<H>>) {
        self.stats(|s| s.connections += 1);
        let _ = self.keep(conn, true);
    }

    /// A server failed to accept a connection.
    pub(super) fn accept_failed(&self, err: &StepError) {
        self.step_error(fmt!("server: accepting a connection"), err, None);
    }

    /// A server's listener lost its device.
    pub(super) fn listener_removed(&self) {
        self.error(fmt!(
            "server: the RDMA device was removed; no longer listening"
        ));
        self.inner.lock().state = State::Error;
    }

    /// A server's connection lost its device.
    pub(super) fn conn_lost_device(&self) {
        self.error(fmt!(
            "server: a connection ended: the RDMA device was removed ({})",
            ErrName(ENODEV)
        ));
    }

    /// Records a connect request a server refused for its own reasons (`why`),
    /// before admission: counted in `rejected`, named in `last_error`.
    pub(super) fn refused(&self, why: fmt::Arguments<'_>) {
        let mut g = self.inner.lock();
        g.stats.rejected += 1;
        set_error(&mut g, fmt!("server: rejected a connect request: {}", why));
    }

    /// Decides on a connect request for a server: the memory budget, `max_conns`
    /// and the ECE policy (see [`admission::admit`]). Returns the ECE to answer
    /// with, or why the request is rejected.
    pub(super) fn admit(&self, req: &ConnectRequest) -> Result<Option<Ece>, RejectReason> {
        let mut g = self.inner.lock();
        if !g.enabled {
            return Err(RejectReason::Consumer);
        }
        g.run.prune();
        let live = g.run.conns.len();
        admission::admit(&g.cfg, live, req.remote_ece.vendor_id).map_err(|r| {
            g.stats.rejected += 1;
            set_error(&mut g, fmt!("server: rejected a connect request: {}", r));
            r.reason()
        })
    }

    /// Records that a client connection finished; the endpoint is `done` once all
    /// have, `error` as soon as one failed.
    pub(super) fn client_finished(&self, ok: bool) {
        let mut g = self.inner.lock();
        g.unfinished = g.unfinished.saturating_sub(1);
        if !ok {
            g.state = State::Error;
        } else if g.unfinished == 0 && g.state != State::Error && g.enabled {
            g.state = State::Done;
        }
    }

    /// Marks a client endpoint running once a connection is established.
    pub(super) fn client_established(&self) {
        let mut g = self.inner.lock();
        g.stats.connections += 1;
        if g.state == State::Connecting {
            g.state = State::Running;
        }
    }
}

/// Opens client connection `index` of an endpoint with the given handler: setup
/// runs on the module's workqueue, everything after in completion handlers.
pub(super) fn spawn_connect<H: EchoConn>(
    shared: &Arc<Shared>,
    cfg: &Config,
    addr: &Addr,
    index: u32,
    handler: impl PinInit<H, Error>,
    qp: QpConfig,
) -> Result {
    let conn = Conn::new_active(handler, cfg.conn_params())?;
    if shared.keep(conn.clone(), false).is_err() {
        return Err(ECONNABORTED);
    }
    shared.inner.lock().setups += 1;
    let addr = *addr;
    let port = cfg.port;
    let sh = shared.clone();
    let r = crate::rdma::spawn(move || {
        let enabled = sh.inner.lock().enabled;
        let res = if enabled {
            conn.connect(&sh.net, addr.as_cstr(), port, qp).map(|()| {
                let c: Arc<dyn EpConn> = conn.clone();
                sh.connected(&c)
            })
        } else {
            conn.close();
            Ok(())
        };
        if let Err(e) = res {
            let why = e
                .reject_data
                .as_ref()
                .and_then(|d| conn.handler().explain_reject(d));
            sh.step_error(
                fmt!("client {}", index),
                &e,
                why.as_ref().map(|w| w as &dyn fmt::Display),
            );
            conn.handler().setup_failed();
        }
        sh.setup_done();
    });
    if let Err(e) = r {
        shared.inner.lock().setups -= 1;
        return Err(e);
    }
    Ok(())
}

/// Closes connections and waits for each; the callers run in process context.
fn close_all(conns: &[Kept]) {
    for k in conns {
        k.conn.close_and_wait();
    }
}

/// The longest the accept deadline's timer waits, in ms: while a connection
/// waits to be established, the deadline is checked at least this often, so
/// that the timer wheel's slack (an eighth of a long delay) does not add to it.
const REAPER_TICK_MS: u32 = 1000;

/// The accept deadline: closes each server connection not established within
/// `accept_timeout_ms` of its accept, whatever timeout the peer's connect
/// request asked the CM for, and counts it.
impl TimerHandler for Shared {
    fn fire(self: Arc<Self>) {
        let mut late = KVec::new();
        let mut g = self.inner.lock();
        g.reaper_armed = false;
        if !g.enabled {
            return;
        }
        let limit = i64::from(g.cfg.accept_timeout_ms);
        let mut next: Option<i64> = None;
        for k in g.run.conns.iter_mut() {
            let Some(t) = k.accepted else {
                continue;
            };
            if k.conn.peer_answered() {
                // Messages went through its QP: its peer holds nothing it
                // does not use, whenever the CM gets to its RTU.
                k.accepted = None;
                continue;
            }
            match k.conn.state() {
                ConnState::Connecting | ConnState::AddrResolved | ConnState::RouteResolved => {}
                // Established, or ended some other way: no deadline any more.
                _ => {
                    k.accepted = None;
                    continue;
                }
            }
            let left = limit - t.elapsed().as_millis();
            if left > 0 {
                next = Some(next.map_or(left, |n| n.min(left)));
            } else if late.push(k.conn.clone(), GFP_KERNEL).is_ok() {
                k.accepted = None;
            } else {
                // No memory to note it now: the next firing closes it.
                next = Some(next.map_or(1, |n| n.min(1)));
            }
        }
        if !late.is_empty() {
            g.stats.accept_timeouts += late.len() as u64;
            set_error(
                &mut g,
                fmt!(
                    "server: accept_timeout_ms {}: {} connection(s) not established; closed",
                    limit,
                    late.len()
                ),
            );
        }
        if let Some(ms) = next {
            // Under `inner`, which `stop` takes before it disarms.
            let ms = u32::try_from(ms).unwrap_or(u32::MAX).min(REAPER_TICK_MS);
            g.reaper_armed = self.reaper.arm(self.clone(), ms);
        }
        drop(g);
        for c in &late {
            c.close();
        }
    }
}

fn set_error(g: &mut Inner, msg: fmt::Arguments<'_>) {
    // Allocates nothing: an error for want of memory is named too.
    g.last_error.set(msg);
}

/// An errno, printed by its name where cmecho knows it.
pub(crate) struct ErrName(pub(crate) Error);

impl fmt::Display for ErrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.name() {
            Some(n) => write!(f, "{}", n.to_str().unwrap_or("?")),
            None => write!(f, "errno {}", self.0.to_errno()),
        }
    }
}
