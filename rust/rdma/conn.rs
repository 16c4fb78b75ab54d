// SPDX-License-Identifier: GPL-2.0

//! One RC connection: a CM id with its QP, CQ, PD and buffers, and its state.
//!
//! A [`Conn`] is made active ([`Conn::new_active`], then [`Conn::connect`]) or
//! passive (by a [`Listener`] inside a connect request), and is released by
//! [`Conn::close`] or [`Conn::close_and_wait`], by its ULP, whatever happened
//! to it before.
//!
//! # States
//!
//! [`ConnState`] is what the ULP sees; `ConnInner` adds who owns the id at
//! each moment. `connecting` is set while [`Conn::connect`] runs, or, for a
//! connection a [`Listener`] accepts, from its connect request until the
//! accept's work item ([`Conn::accept_later`]) is done: only that task
//! destroys the id meanwhile. `closer` is set once a close has taken the
//! id and the QP resources out to release them.
//!
//! | In state | On | Goes to | And | The id is destroyed by |
//! |---|---|---|---|---|
//! | (none) | [`Conn::new_active`], or a connect request | `Connecting` | the connection holds a reference on itself (`me`) until closed | - |
//! | `Connecting` | `ADDR_RESOLVED` | `AddrResolved` | | - |
//! | `AddrResolved` | `ROUTE_RESOLVED` | `RouteResolved` | the route is final | - |
//! | setting up | `ESTABLISHED` | `Established` | [`ConnHandler::established`] | - |
//! | setting up | `ADDR_ERROR` or `ROUTE_ERROR` with `ETIMEDOUT`, in [`Conn::connect`] | back to `Connecting` or `AddrResolved` | the step is repeated, up to `resolve_retries` times | - |
//! | setting up | any other `*_ERROR`, `UNREACHABLE`, `REJECTED` | `Failed` | [`Conn::connect`] fails and closes, or the accept's work item releases it; else the connection closes itself | the close, or the accept's work item |
//! | `Established` | `*_ERROR`, `DISCONNECTED` | `Failed`, `Disconnected` | [`ConnHandler::ended`] once, with [`EndReason::Disconnected`]; the ULP closes | the close |
//! | setting up | `DISCONNECTED` | `Disconnected` | closes itself unless `connecting` | the close |
//! | `connecting` | `DEVICE_REMOVAL` | `DeviceRemoved` (unchanged if `Closing`) | [`Conn::connect`] or the accept fails and releases; if it is still `Established` (nothing ended or closed it since `ESTABLISHED`), [`Conn::connect`] succeeds and [`ConnHandler::ended`] is called once with [`EndReason::DeviceRemoval`] | [`Conn::connect`], or the accept's work item |
//! | not `connecting`, id still held (also `Closing` with the release queued) | `DEVICE_REMOVAL` | `DeviceRemoved` (unchanged if `Closing`) | QP resources destroyed in the handler; [`ConnHandler::ended`] once with [`EndReason::DeviceRemoval`] if it was established; closes itself if it never was (an accepted connection without its RTU); the release finds nothing left | the CM, when the handler returns |
//! | id taken by the release | `DEVICE_REMOVAL` | unchanged | nothing: `rdma_destroy_id` waits for this handler | the release |
//! | any but `Closing`, `Closed` | [`Conn::close`] | `Closing` | the release is queued on the module's workqueue | the close |
//! | any, `connecting` | the release | `Closing` (or stays `DeviceRemoved`) | [`Conn::connect`] or the accept's work item sees it and releases when it is done | [`Conn::connect`], or the accept's work item |
//! | any, not `connecting` | the release | `Closing`, then `Closed` | disconnect, QP resources, id, sink, `me`, in that order | the release |
//! | accepted, `connecting` | the accept's work item runs | unchanged | if still `Connecting`: QP, [`ConnHandler::setup`], `rdma_accept`, under the id's handler mutex; then released if a step failed ([`ConnHandler::accept_failed`] after), if `Closing` or `DeviceRemoved`, or if `Failed` or `Disconnected` without `ESTABLISHED` having come (after it, [`ConnHandler::ended`] was called and the ULP closes) | the accept's work item, when it releases |
//! | accepted, `Connecting` | a successful completion | unchanged | `rdma_notify` (communication established), once: the CM delivers `ESTABLISHED` without waiting for the peer's RTU | - |
//! | `Closing` or `Closed` | `ESTABLISHED` | unchanged | [`ConnHandler::established`] is still called, and [`Conn::connect`] succeeds | - |
//! | `Closing` or `Closed` | any other event but `DEVICE_REMOVAL` | unchanged | nothing | - |
//!
//! "Setting up" is `Connecting`, `AddrResolved` or `RouteResolved`; "the
//! release" is `close_now`, run by [`Conn::close`]'s work item,
//! [`Conn::close_and_wait`], [`Conn::connect`] when it fails or was aborted,
//! or the accept's work item when it releases.
//! After `ESTABLISHED`, [`Conn::connect`] succeeds whatever follows.
//!
//! [`Listener`]: super::Listener
//! [`Listener::stop`]: super::Listener::stop
//!
//! # Lock order
//!
//! Outermost first (lockdep class names in parentheses):
//!
//! 1. The CM's `handler_mutex` of an id: held by the CM while its event
//!    handlers run ([`ConnHandler::established`] and [`ConnHandler::ended`],
//!    [`ListenHandler`] methods; for a connect request, the listener's
//!    and then the new id's); taken by `rdma_connect`, by the accept's work
//!    item (`rdma_lock_handler`, around the QP's creation, `setup` and
//!    `rdma_accept`) and, in effect, by `rdma_destroy_id`, which waits for it.
//! 2. A CQ's completion work: [`ConnHandler::completion`] runs in it, and
//!    destroying QP resources drains it.
//! 3. The ULP's own locks.
//! 4. [`Conn`]'s `res` (`cmecho_conn_res`): held while a [`Conn::with_res`]
//!    closure runs, and while the QP resources are created or taken out.
//! 5. [`Conn`]'s `inner` (`cmecho_conn_inner`) and [`Listener`]'s `inner`
//!    (`cmecho_listener_inner`): never nested with each other or with 1 to 4
//!    the other way. Below them only the CM's `qp_mutex`, taken by the
//!    parameter setters, `rdma_disconnect` and `rdma_create_qp`.
//!
//! So no lock of 3 to 5 is held while calling a CM function that takes a
//! handler mutex, or while draining a QP: this layer calls `rdma_connect`,
//! `rdma_resolve_*`, `rdma_listen` and `rdma_destroy_id` and destroys QP
//! resources with its own locks released. The ULP's closures run under a lock
//! of this layer only in [`Conn::with_res`], under `cmecho_conn_res`; what
//! would take that lock again from the closure fails with `EDEADLK`. A `Conn`
//! waits on `changed` (`cmecho_conn_changed`) with only its `inner` held, and
//! its `res` too when [`Conn::disconnect_and_wait`] is called from a closure:
//! that wait is bounded, and the `DISCONNECTED` handler needs only `inner`.
//!
//! The calls that wait for CM handlers or completions ([`Conn::connect`],
//! [`Conn::close_and_wait`]) fail with `EDEADLK` from any callback of this
//! layer and any [`Conn::with_res`] closure, [`Conn::disconnect_and_wait`]
//! from any callback (its wait is bounded, so a closure outside a callback may
//! call it), and
//! [`Listener::stop`] defers its work from them: a callback waiting for
//! another's handler or completion, while that one waits for it, is a cycle no
//! lock order shows. `with_res` does not nest, so two `cmecho_conn_res` are
//! never held at once.

use super::context::{current_task, in_callback, in_handler, in_with_res, Scope, WITH_RES};
use super::cq::{Completion, FromCq, WcError};
use super::error::{step_err, to_step, StepError};
use super::event::{Event, EventKind};
use super::ffi;
use super::id::{give_back, CmEvents, EventId, IdPtr, SinkPtr, Verdict};
use super::netns::NetNs;
use super::params::{ConnParams, Ece, PrivateData};
use super::verbs::{self, QpAttrs, QpConfig};
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use kernel::ffi::{c_int, c_ulong};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::msecs_to_jiffies;
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// The peer disconnected (or the connection failed after being established).
    Disconnected,
    /// The RDMA device went away.
    DeviceRemoval,
}

/// The ULP side of one connection: its events and work completions.
///
/// Every method runs in a context that may sleep but must not block for long: CM
/// handler context, the CQ's workqueue, or, for an accepted connection's
/// `setup` and `accept_failed`, the module's workqueue (for `setup`, with the
/// id's handler mutex held). None may wait for the connection to close ([`Conn::close`] is fine: it
/// defers).
pub(crate) trait ConnHandler: Send + Sync + Sized + 'static {
    /// Allocates buffers and posts first receives: runs once the QP exists, before
    /// the connect or accept.
    fn setup(&self, conn: &Conn<Self>) -> Result;

    /// A work completion of one of the connection's work requests.
    fn completion(&self, conn: &Conn<Self>, tag: u32, status: Result<u32, WcError>);

    /// The connection is established.
    fn established(&self, conn: &Conn<Self>);

    /// The connection ended after being established. Called at most once.
    fn ended(&self, conn: &Conn<Self>, reason: EndReason);

    /// [`Conn::connect`] is about to start `step`: called on the connecting task,
    /// in [`ConnectStep`] order, with no lock of this layer held, so it may sleep.
    /// An error fails the connect at that step. Optional: the default does
    /// nothing. A ULP that times the steps, or holds many connections at each
    /// step until all reach it (as rdma-core's `cmtime` does), hooks in here.
    /// While it runs, a close or a device removal of `conn` waits for it: a
    /// hook that waits must watch [`Conn::is_open`] and fail once it is false.
    fn before_step(&self, _conn: &Conn<Self>, _step: ConnectStep) -> Result {
        Ok(())
    }

    /// The private data [`Conn::connect`] sends with its connect request (the
    /// ULP's format; the peer's listener reads it in
    /// [`ConnectRequest::private_data`]). Optional: the default sends none.
    ///
    /// [`ConnectRequest::private_data`]: super::ConnectRequest::private_data
    fn connect_data(&self) -> PrivateData {
        PrivateData::EMPTY
    }

    /// The accept of this passive connection failed at `err.step` (creating
    /// the QP, [`ConnHandler::setup`], `rdma_accept`), after the listener's
    /// [`ListenHandler::accepted`] gave it to the ULP: the connection is
    /// released already, or being released by a concurrent close. Runs on the module's workqueue. Optional: the default
    /// does nothing.
    ///
    /// [`ListenHandler::accepted`]: super::ListenHandler::accepted
    fn accept_failed(&self, _conn: &Conn<Self>, _err: StepError) {}
}

/// The steps of [`Conn::connect`], in the order it runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnectStep {
    /// `rdma_create_id` and the parameters that must precede route resolution.
    CreateId,
    /// `rdma_resolve_addr` until `ADDR_RESOLVED` (with its retries).
    ResolveAddr,
    /// `rdma_resolve_route` until `ROUTE_RESOLVED` (with its retries).
    ResolveRoute,
    /// PD, CQ, QP and the handler's [`ConnHandler::setup`].
    CreateQp,
    /// `rdma_connect` until `ESTABLISHED`.
    Connect,
}

impl ConnectStep {
    /// The step's name: the CM call it starts with.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::CreateId => "rdma_create_id",
            Self::ResolveAddr => "rdma_resolve_addr",
            Self::ResolveRoute => "rdma_resolve_route",
            Self::CreateQp => "rdma_create_qp",
            Self::Connect => "rdma_connect",
        }
    }
}

/// The state of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Being set up.
    Connecting,
    /// `rdma_resolve_addr()` completed.
    AddrResolved,
    /// `rdma_resolve_route()` completed.
    RouteResolved,
    /// Established.
    Established,
    /// Setup failed with the given event.
    Failed(EventKind, i32),
    /// The peer disconnected.
    Disconnected,
    /// The device was removed.
    DeviceRemoved,
    /// Being closed.
    Closing,
    /// Closed: id, QP and buffers released.
    Closed,
}

/// State of a connection protected by [`Conn::inner`].
struct ConnInner<H: ConnHandler> {
    /// The connection's reference on itself, from creation until [`Conn::close`]:
    /// an open connection stays alive even when its ULP drops every handle.
    me: Option<Arc<Conn<H>>>,
    id: Option<IdPtr>,
    sink: Option<SinkPtr>,
    state: ConnState,
    remote_ece: Ece,
    /// The task running this connection's CM event handler, or the accept's
    /// work item holding the id's handler mutex, if one runs (as an address,
    /// compared only with `current`).
    handler_task: usize,
    ended: bool,
    /// A `close_now` is releasing the resources; others wait for `Closed`.
    closer: bool,
    /// [`Conn::connect`] is running, or a [`Listener`] is accepting the
    /// connection (from its request's handler until the accept's work item is
    /// done): it alone may destroy the id meanwhile.
    connecting: bool,
    /// The task running [`Conn::connect`] or the accept's work item (as an
    /// address, compared only with `current`): `setup` runs on it.
    connect_task: usize,
    /// Made by [`Conn::new_active`]: only such a connection may [`Conn::connect`].
    active: bool,
    /// The route is final: resolved on the active side (`rdma_resolve_route`
    /// is not called again), or taken from the request on the passive side.
    route_final: bool,
    /// [`Conn::disconnect`] was called: the QP is going into error, and the
    /// flushes that follow are this side's own doing.
    disconnecting: bool,
    /// `ESTABLISHED` came: [`Conn::connect`] succeeded, whatever follows.
    was_established: bool,
    /// The private data of the peer's reject, once `REJECTED` came.
    reject_data: PrivateData,
    /// The QP of an accepted connection, from [`Conn::accept`] in the request's
    /// handler until its work item creates it.
    accept_qp: Option<QpConfig>,
}

/// One RC connection: a CM id with its QP, CQ, PD and buffers.
///
/// Created by [`Conn::connect`] (active side) or by a [`Listener`] (passive side);
/// released by [`Conn::close`].
///
/// # Invariants
///
/// - `inner.id` is the connection's own live CM id, when `Some`; `inner.sink`
///   is the box its context points to, freed only once the id is destroyed
///   or handed back with it.
/// - `res` is `Some` only while `inner.id` is: the QP resources are created on
///   the id and always taken out with it, in one critical section of both
///   locks, and destroyed before it.
/// - While `inner.connecting`, only the task that set it takes `inner.id`:
///   [`Conn::connect`]; for an accepted connection, the request's handler in
///   [`Conn::accept`], then the accept's work item.
/// - `inner.me` holds a reference from creation until a close takes it.
/// - Once `inner.closer` is set, only that `close_now` releases, and
///   `ConnState::Closed` is final.
/// - [`ConnHandler::ended`] is called only by the one that set `inner.ended`
///   (on an established connection), so at most once.
#[pin_data]
pub(crate) struct Conn<H: ConnHandler> {
    /// The QP resources, under a lock of their own (taken before `inner`) so
    /// that a [`Conn::with_res`] closure may use the rest of the connection.
    #[pin]
    res: Mutex<Option<verbs::ResPtr<Conn<H>>>>,
    /// The task running a [`Conn::with_res`] closure, if one runs (as an
    /// address, compared only with `current`; `res` is held meanwhile).
    res_task: AtomicUsize,
    #[pin]
    inner: Mutex<ConnInner<H>>,
    #[pin]
    changed: CondVar,
    /// The task running one of this connection's completions, if one runs (as
    /// an address, compared only with `current`; a CQ runs one at a time).
    cq_task: AtomicUsize,
    /// The work item of [`Conn::close`], allocated with the connection: a close
    /// from a callback can always be deferred, whatever memory is left.
    #[pin]
    close_work: Work<Conn<H>, CLOSE_WORK>,
    /// The work item that finishes an accept off the CM's worker
    /// ([`Conn::accept_later`]), allocated with the connection likewise.
    #[pin]
    accept_work: Work<Conn<H>, ACCEPT_WORK>,
    /// Nothing more to tell the CM on a successful completion: the connection
    /// is active, or `ESTABLISHED` came, or [`Conn::comm_est`] told it once.
    /// Read without a lock on every completion; set under `inner`.
    comm_est_done: AtomicBool,
    params: ConnParams,
    #[pin]
    handler: H,
}

/// How much longer than the CM's own resolution timeout to wait for its event.
const RESOLVE_SLACK_MS: u32 = 1000;

/// The id of [`Conn`]'s close work item.
const CLOSE_WORK: u64 = 0;
/// The id of [`Conn`]'s accept work item.
const ACCEPT_WORK: u64 = 1;

impl<H: ConnHandler> Conn<H> {
    fn new(handler: impl PinInit<H, Error>, params: ConnParams) -> Result<Arc<Self>> {
        let conn = Arc::pin_init(
            try_pin_init!(Self {
                res <- new_mutex!(None, "cmecho_conn_res"),
                res_task: AtomicUsize::new(0),
                inner <- new_mutex!(ConnInner {
                    me: None,
                    id: None,
                    sink: None,
                    state: ConnState::Connecting,
                    remote_ece: Ece::default(),
                    handler_task: 0,
                    ended: false,
                    closer: false,
                    connecting: false,
                    connect_task: 0,
                    active: false,
                    route_final: false,
                    disconnecting: false,
                    was_established: false,
                    reject_data: PrivateData::EMPTY,
                    accept_qp: None,
                }, "cmecho_conn_inner"),
                changed <- new_condvar!("cmecho_conn_changed"),
                cq_task: AtomicUsize::new(0),
                close_work <- new_work!("cmecho_conn_close"),
                accept_work <- new_work!("cmecho_conn_accept"),
                comm_est_done: AtomicBool::new(false),
                params,
                handler <- handler,
            }),
            GFP_KERNEL,
        )?;
        conn.inner.lock().me = Some(conn.clone());
        Ok(conn)
    }

    /// Creates an active-side connection that [`Conn::connect`] then connects.
    ///
    /// `params` are the connection's for good: nothing can change them later.
    pub(crate) fn new_active(
        handler: impl PinInit<H, Error>,
        params: ConnParams,
    ) -> Result<Arc<Self>> {
        let conn = Self::new(handler, params)?;
        conn.inner.lock().active = true;
        conn.comm_est_done.store(true, Ordering::Relaxed);
        Ok(conn)
    }

    /// Creates a passive-side connection for a connect request whose peer sent
    /// `remote_ece`; [`Conn::accept`] then accepts it.
    ///
    /// It is `connecting` from the start, with the calling task as its handler
    /// task: the listener's `accepted` runs in the request's CM handler, and
    /// `setup` in the accept's work item holding the id's handler mutex, so a
    /// `close_and_wait` from them must fail rather than wait for itself, and a
    /// `close` meanwhile must leave the id to the accept.
    pub(super) fn new_passive(
        handler: impl PinInit<H, Error>,
        params: ConnParams,
        remote_ece: Ece,
    ) -> Result<Arc<Self>> {
        let conn = Self::new(handler, params)?;
        {
            let mut g = conn.inner.lock();
            g.remote_ece = remote_ece;
            // The request carried the route; nothing resolves it again.
            g.route_final = true;
            g.handler_task = current_task();
            g.connecting = true;
        }
        Ok(conn)
    }

    /// Takes the connect request on `child`, the new id of event `ev`, inside
    /// the request's handler: only what must happen there. It takes the id,
    /// points the id's events to this connection and applies the parameters
    /// that must precede the accept. The rest (QP, `setup`, `rdma_accept`) runs
    /// off the CM's worker once the caller has called [`Conn::accept_later`]:
    /// the CM's worker delivers the events of every id of the device, and a
    /// burst of requests each creating a QP and registering buffers there
    /// would hold up the others' `ESTABLISHED` (and the peers' retries) for
    /// longer than they wait.
    ///
    /// On error the id is handed back: the caller returns the [`Verdict`] that
    /// comes with the error from the request's handler.
    ///
    /// # Safety
    ///
    /// `child` must be the new id of `ev`, a `CONNECT_REQUEST` whose handler
    /// the caller runs, and `self` must come from [`Conn::new_passive`] and be
    /// accepted only once.
    pub(super) unsafe fn accept(
        self: &Arc<Self>,
        ev: &EventId,
        child: IdPtr,
        qp: QpConfig,
    ) -> Result<(), (StepError, Verdict)> {
        let raw = child.as_ptr();
        {
            let mut g = self.inner.lock();
            g.id = Some(child);
            g.accept_qp = Some(qp);
        }
        let r = (|| {
            let sink = SinkPtr::new(self.clone()).map_err(|e| step_err("alloc", e))?;
            // SAFETY: `raw` is the live new id of this CONNECT_REQUEST, which
            // this connection owns (`inner.id`); its events go to the new sink
            // from now on.
            unsafe { ffi::cmecho_cm_set_context(raw, sink.as_ctx()) };
            self.inner.lock().sink = Some(sink);
            // The guarantee on the passive side: the new id gets its parameters
            // now, before its QP exists and before the accept.
            self.with_id(|id| id.apply_early(&self.params))
        })();
        r.map_err(|e| (e, self.give_back_request(ev)))
    }

    /// Releases a connection whose accept failed inside the request's handler
    /// (event `ev`): its id goes back to the CM with the verdict returned, which
    /// destroys it when the handler returns.
    fn give_back_request(&self, ev: &EventId) -> Verdict {
        let (id, res, sink, me) = {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            g.connecting = false;
            g.state = ConnState::Closed;
            g.handler_task = 0;
            g.accept_qp = None;
            (g.id.take(), rg.take(), g.sink.take(), g.me.take())
        };
        self.changed.notify_all();
        // The caller holds its own reference: this never drops `self`.
        drop(me);
        if let Some(res) = res {
            // SAFETY: The id is handed back only below; this is a CM handler,
            // not a completion.
            unsafe { res.destroy() };
        }
        // While `connecting`, nothing but the accept takes the id.
        match id {
            Some(id) => give_back(id, ev, sink),
            None => Verdict::Keep,
        }
    }

    /// Queues the rest of the accept that [`Conn::accept`] began (QP, `setup`,
    /// `rdma_accept`) on the module's workqueue, from the request's handler
    /// (event `ev`), once the ULP has the connection. The handler then returns
    /// with the request neither accepted nor rejected: the CM answers the
    /// peer's repeated requests with an MRA (its own "wait"), and the accept
    /// takes the id's handler mutex (`rdma_lock_handler`) as an event handler
    /// would. On error (the module has no workqueue) the id is handed back with
    /// the verdict returned. The workqueue runs up to 1024 items at once
    /// (unbound, default `max_active`); a ULP whose own blocking work there
    /// (connects waiting for `ESTABLISHED`) takes them all holds accepts back
    /// until its waits time out.
    pub(super) fn accept_later(self: &Arc<Self>, ev: &EventId) -> Result<(), Verdict> {
        // The request's handler is no longer this connection's; cleared before
        // the work item can run and set its own task.
        self.inner.lock().handler_task = 0;
        match super::workqueue::enqueue::<_, ACCEPT_WORK>(self.clone()) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.give_back_request(ev)),
        }
    }

    /// The deferred half of an accept, on the module's workqueue. With the
    /// id's handler mutex held (as `rdma_accept` requires; the CM's handlers of
    /// the id wait meanwhile), creates the QP, runs `setup` and `rdma_accept`,
    /// unless the connection was closed, failed or lost its device since the
    /// request. Then decides in one critical section, clearing `connecting`,
    /// whether it stays: it is released here when a step failed, when it is
    /// closing or its device was removed, or when it failed or was disconnected
    /// before `ESTABLISHED` (while `connecting` nothing else closes it).
    fn accept_deferred(self: Arc<Self>) {
        let me = current_task();
        let (raw, qp) = {
            let mut g = self.inner.lock();
            g.connect_task = me;
            (g.id.as_ref().map(|id| id.as_ptr()), g.accept_qp.take())
        };
        let r = match (raw, qp) {
            (Some(raw), Some(qp)) => {
                // SAFETY: `raw` is this connection's live id: while `connecting`
                // only this work item destroys it (`close_now` and
                // `DEVICE_REMOVAL` leave it), which it does only after unlocking.
                unsafe { ffi::rdma_lock_handler(raw) };
                let go = {
                    let mut g = self.inner.lock();
                    g.handler_task = me;
                    g.state == ConnState::Connecting
                };
                let r = if go {
                    // A callback of this layer: what would wait for this id's
                    // handlers (or for this accept) from `setup` fails.
                    let _scope = Scope::enter(0);
                    // SAFETY: `raw` is live (above), and this task holds its
                    // handler mutex.
                    unsafe { self.accept_steps(raw, &qp) }
                } else {
                    Ok(())
                };
                self.inner.lock().handler_task = 0;
                // SAFETY: Locked above by this task; the id is still live.
                unsafe { ffi::rdma_unlock_handler(raw) };
                r
            }
            // Released in the request's handler already (`Closed`): nothing
            // to do.
            _ => Ok(()),
        };
        let release = {
            let mut g = self.inner.lock();
            g.connecting = false;
            g.connect_task = 0;
            r.is_err()
                || matches!(
                    g.state,
                    ConnState::Closing | ConnState::Closed | ConnState::DeviceRemoved
                )
                || (!g.was_established
                    && matches!(g.state, ConnState::Failed(..) | ConnState::Disconnected))
        };
        self.changed.notify_all();
        if release {
            self.close_now();
        }
        if let Err(e) = r {
            self.handler.accept_failed(&self, e);
        }
    }

    /// The steps of an accept that run off the CM's worker, on its id `child`:
    /// QP, the handler's `setup`, `rdma_accept`.
    ///
    /// # Safety
    ///
    /// `child` must be this connection's live id, and the caller must hold
    /// its handler mutex.
    unsafe fn accept_steps(
        self: &Arc<Self>,
        child: *mut ffi::RdmaCmId,
        qp: &QpConfig,
    ) -> Result<(), StepError> {
        self.create_res(qp)
            .map_err(|e| step_err("rdma_create_qp", e))?;
        self.handler.setup(self).map_err(|e| step_err("setup", e))?;
        // An accept has no retry count of its own: the CM ignores it.
        let data = PrivateData::EMPTY;
        let mut param = cm_conn_param(&self.params, 0, &data);
        let mut ece = cm_ece(&self.params);
        // SAFETY: `child` is live and the caller holds its handler mutex, which
        // `rdma_accept()` requires. `param` (with `data`) and `ece` are valid
        // for the call, which copies what it keeps of them.
        let ret = unsafe { ffi::rdma_accept_ece(child, &mut param, &mut ece) };
        to_step("rdma_accept", ret)
    }

    /// Connects to `addr`:`port` from namespace `net`, blocking until established.
    ///
    /// Applies the parameters at their required moments (see the module
    /// documentation), creates the QP with `qp` between route resolution and
    /// connect, and calls `handler.setup()` before connecting. On failure the
    /// connection is closed. [`Conn::close`] from another thread aborts it. Once
    /// `ESTABLISHED` came it succeeds, even when the connection failed or closed
    /// before this task woke up: its handler (`ended`, completions) says why. Must be
    /// called from process context (it sleeps): `EDEADLK` from a callback of this
    /// layer (a CM event or a completion) or a [`Conn::with_res`] closure. Only a
    /// connection made by [`Conn::new_active`] connects, once: `EINVAL` for an
    /// accepted one, `ECONNABORTED` for a second call.
    pub(crate) fn connect(
        self: &Arc<Self>,
        net: &NetNs,
        addr: &CStr,
        port: u16,
        qp: QpConfig,
    ) -> Result<(), StepError> {
        {
            let mut g = self.inner.lock();
            if !g.active {
                // An accepted connection: its id and QP are the listener's doing.
                return Err(step_err("rdma_connect", EINVAL));
            }
            if in_callback() {
                // It waits for CM events, which this callback may be holding up.
                return Err(step_err("rdma_connect", EDEADLK));
            }
            if g.state != ConnState::Connecting || g.connecting || g.id.is_some() {
                return Err(step_err("rdma_connect", ECONNABORTED));
            }
            g.connecting = true;
            g.connect_task = current_task();
        }
        let r = self.connect_steps(net, addr, port, &qp);
        let (aborted, established) = {
            let mut g = self.inner.lock();
            g.connecting = false;
            g.connect_task = 0;
            (
                matches!(g.state, ConnState::Closing | ConnState::DeviceRemoved),
                g.was_established,
            )
        };
        match r {
            Err(e) => {
                self.close_now();
                Err(e)
            }
            Ok(()) if aborted => {
                // A close (or a device removal) came while connecting: finish it.
                // Once established, the connect itself succeeded: the close is
                // the handler's doing or reported to it (`ended`).
                self.close_now();
                if established {
                    Ok(())
                } else {
                    Err(step_err("rdma_connect", ECONNABORTED))
                }
            }
            Ok(()) => Ok(()),
        }
    }

    /// Calls the CM on the id during [`Conn::connect`], without holding the
    /// connection's lock: the CM may run this id's event handler meanwhile (which
    /// takes that lock), and `rdma_connect` takes the handler mutex itself.
    fn connect_call(
        &self,
        step: &'static str,
        f: impl FnOnce(*mut ffi::RdmaCmId) -> c_int,
    ) -> Result<(), StepError> {
        let id = match &self.inner.lock().id {
            Some(id) => id.as_ptr(),
            None => return Err(step_err(step, ECONNABORTED)),
        };
        // The id stays live after the lock is released: while `connecting` is set,
        // `close_now` and `DEVICE_REMOVAL` leave its destruction to `connect`, the
        // caller.
        to_step(step, f(id))
    }

    fn connect_steps(
        self: &Arc<Self>,
        net: &NetNs,
        addr: &CStr,
        port: u16,
        qp: &QpConfig,
    ) -> Result<(), StepError> {
        self.step(ConnectStep::CreateId)?;
        let sink = SinkPtr::new(self.clone()).map_err(|e| step_err("alloc", e))?;
        let id = match IdPtr::create(net, &sink) {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: No id was created with this sink.
                unsafe { sink.free() };
                return Err(step_err("rdma_create_id", e));
            }
        };
        {
            let mut g = self.inner.lock();
            if g.state != ConnState::Connecting {
                // Closed before it started.
                drop(g);
                id.destroy();
                // SAFETY: The id using the sink is destroyed.
                unsafe { sink.free() };
                return Err(step_err("rdma_create_id", ECONNABORTED));
            }
            g.id = Some(id);
            g.sink = Some(sink);
        }
        // The guarantee: everything that must precede route resolution, now.
        self.with_id(|id| id.apply_early(&self.params))?;

        self.step(ConnectStep::ResolveAddr)?;
        // Both resolutions take an `unsigned long`, which holds every `u32`.
        let timeout = self.params.resolve_timeout_ms as c_ulong;
        self.resolve("rdma_resolve_addr", ConnState::AddrResolved, |id| {
            match net.sockaddr(addr, port) {
                // SAFETY: `connect_call` passes a live id (see there); the address
                // is valid storage the CM only reads; no source address.
                Ok(sa) => unsafe {
                    ffi::rdma_resolve_addr(id, ptr::null_mut(), sa.as_ptr(), timeout)
                },
                Err(e) => e.to_errno(),
            }
        })?;

        self.step(ConnectStep::ResolveRoute)?;
        self.resolve("rdma_resolve_route", ConnState::RouteResolved, |id| {
            // SAFETY: As above.
            unsafe { ffi::rdma_resolve_route(id, timeout) }
        })?;

        self.step(ConnectStep::CreateQp)?;
        self.create_res(qp)
            .map_err(|e| step_err("rdma_create_qp", e))?;
        self.handler.setup(self).map_err(|e| step_err("setup", e))?;

        self.step(ConnectStep::Connect)?;
        let p = &self.params;
        let data = self.handler.connect_data();
        let mut param = cm_conn_param(p, p.retry_count.get(), &data);
        let mut ece = cm_ece(p);
        self.connect_call("rdma_connect", |id| {
            // SAFETY: As above. The ack timeout was applied before route resolution.
            // `param` (with the private data it points to, `data`) and `ece` are
            // valid for the call, which copies what it keeps of them.
            unsafe { ffi::rdma_connect_ece(id, &mut param, &mut ece) }
        })?;
        self.wait_for(ConnState::Established, "rdma_connect", p.connect_timeout_ms)
    }

    /// Runs the handler's [`ConnHandler::before_step`] hook during
    /// [`Conn::connect`], on its task and with no lock held.
    fn step(&self, step: ConnectStep) -> Result<(), StepError> {
        self.handler
            .before_step(self, step)
            .map_err(|e| step_err(step.name(), e))
    }

    /// Runs one resolution step (`call`, then the wait for `want`) during
    /// [`Conn::connect`], and again, up to `resolve_retries` more times, when the
    /// CM reports that an attempt timed out: the CM has then put the id back where
    /// it was before the step, so the same call may be repeated.
    fn resolve(
        &self,
        step: &'static str,
        want: ConnState,
        call: impl Fn(*mut ffi::RdmaCmId) -> c_int,
    ) -> Result<(), StepError> {
        let p = &self.params;
        let wait_ms = p.resolve_timeout_ms.saturating_add(RESOLVE_SLACK_MS);
        // At most `resolve_retries + 1` (256): no overflow whatever the parameter.
        let mut attempts = 1u16;
        loop {
            self.connect_call(step, &call)?;
            match self.wait_for(want, step, wait_ms) {
                Err(_)
                    if attempts <= u16::from(p.resolve_retries) && self.retry_after_timeout() =>
                {
                    attempts += 1;
                }
                Err(mut e) => {
                    e.attempts = attempts;
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    /// After a failed resolution attempt: when the CM reported a timeout, puts the
    /// connection back in the state before the attempt and returns true.
    fn retry_after_timeout(&self) -> bool {
        let mut g = self.inner.lock();
        let back = match g.state {
            ConnState::Failed(EventKind::AddrError, s) if s == ETIMEDOUT.to_errno() => {
                ConnState::Connecting
            }
            ConnState::Failed(EventKind::RouteError, s) if s == ETIMEDOUT.to_errno() => {
                ConnState::AddrResolved
            }
            _ => return false,
        };
        g.state = back;
        // The failure event marked the connection ended; it is not.
        g.ended = false;
        true
    }

    /// Disconnects and waits up to `ms` for the peer's answer (`DISCONNECTED`).
    ///
    /// Process context only: `EDEADLK`, and no disconnect, from a callback of
    /// this layer (a CM event or a completion), whose CM handler or worker the
    /// wait would hold up for all of `ms`.
    #[allow(
        dead_code,
        reason = "API for ULPs; samples/cmtime uses it, cmecho.ko does not"
    )]
    pub(crate) fn disconnect_and_wait(&self, ms: u32) -> Result<(), StepError> {
        let me = current_task();
        // This connection's own handler or completion, also past the tasks
        // `in_handler` tracks.
        let own =
            self.inner.lock().handler_task == me || self.cq_task.load(Ordering::Relaxed) == me;
        if own || in_handler() {
            return Err(step_err("rdma_disconnect", EDEADLK));
        }
        self.disconnect();
        self.wait_for(ConnState::Disconnected, "rdma_disconnect", ms)
    }

    /// Runs `f` on the live id, or fails with `ENOTCONN`.
    fn with_id<R>(&self, f: impl FnOnce(&IdPtr) -> Result<R, StepError>) -> Result<R, StepError> {
        let g = self.inner.lock();
        match &g.id {
            Some(id) => f(id),
            None => Err(step_err("id", ENOTCONN)),
        }
    }

    /// Waits until the state is `want`, or setup failed, or `ms` passed.
    fn wait_for(&self, want: ConnState, step: &'static str, ms: u32) -> Result<(), StepError> {
        let mut g = self.inner.lock();
        let mut left = msecs_to_jiffies(ms);
        loop {
            match g.state {
                s if s == want => return Ok(()),
                // Established, then failed, disconnected or closed before this
                // task woke up: the connect succeeded; what came after is the
                // handler's to report (`ended`, its completions).
                _ if want == ConnState::Established && g.was_established => return Ok(()),
                ConnState::Failed(kind, status) => {
                    let reject_msg = match (&g.id, kind) {
                        (Some(id), EventKind::Rejected) => {
                            // SAFETY: The id is live while the lock is held and `g.id`
                            // is `Some`; the CM returns a static string.
                            Some(unsafe {
                                CStr::from_char_ptr(ffi::rdma_reject_msg(id.as_ptr(), status))
                            })
                        }
                        _ => None,
                    };
                    return Err(StepError {
                        step: kind.name(),
                        reject_msg,
                        err: if kind == EventKind::Rejected {
                            ECONNREFUSED
                        } else if status < 0 {
                            Error::from_errno(status)
                        } else {
                            EIO
                        },
                        status: Some(status),
                        attempts: 1,
                        reject_data: (kind == EventKind::Rejected).then_some(g.reject_data),
                    });
                }
                ConnState::DeviceRemoved => return Err(step_err("DEVICE_REMOVAL", ENODEV)),
                ConnState::Closing | ConnState::Closed | ConnState::Disconnected => {
                    return Err(step_err(step, ECONNABORTED));
                }
                _ => {}
            }
            if left == 0 {
                return Err(step_err(step, ETIMEDOUT));
            }
            left = match self.changed.wait_interruptible_timeout(&mut g, left) {
                kernel::sync::CondVarTimeoutResult::Timeout => 0,
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => jiffies,
                kernel::sync::CondVarTimeoutResult::Signal { .. } => {
                    return Err(step_err(step, EINTR))
                }
            };
        }
    }

    /// Creates PD, CQ and QP on the id; the QP resources hold a reference on `self`.
    fn create_res(self: &Arc<Self>, qp: &QpConfig) -> Result {
        let mut rg = self.res.lock();
        let g = self.inner.lock();
        let id = g.id.as_ref().ok_or(ENOTCONN)?;
        *rg = Some(verbs::ResPtr::create(id, self.clone(), qp)?);
        Ok(())
    }

    /// Runs `f` with the QP resources, or fails with `ENOTCONN` once they are gone.
    ///
    /// `f` runs under the resources' lock, which keeps them from being destroyed
    /// meanwhile, and may use the rest of the connection. What could wait for
    /// that lock, or for this connection's completions, from within `f` fails
    /// with `EDEADLK`: a nested `with_res` of any connection (or
    /// [`Conn::qp_attrs`]), [`Conn::close_and_wait`] and [`Conn::connect`];
    /// [`Listener::stop`] defers. [`Conn::close`] from `f` closes after it.
    pub(crate) fn with_res<R>(
        &self,
        f: impl FnOnce(&verbs::ResPtr<Self>) -> Result<R>,
    ) -> Result<R> {
        let me = current_task();
        if self.res_task.load(Ordering::Relaxed) == me || in_with_res() {
            return Err(EDEADLK);
        }
        let g = self.res.lock();
        let res = g.as_ref().ok_or(ENOTCONN)?;
        let _scope = Scope::enter(WITH_RES);
        self.res_task.store(me, Ordering::Relaxed);
        let r = f(res);
        self.res_task.store(0, Ordering::Relaxed);
        r
    }

    /// The connection's handler.
    pub(crate) fn handler(&self) -> &H {
        &self.handler
    }

    /// Whether the connection is known to be up: `ESTABLISHED` came, or, for
    /// an accepted one, a work request of it completed (its peer's QP talks
    /// to ours, even while the peer's RTU is late or lost).
    pub(crate) fn peer_answered(&self) -> bool {
        let g = self.inner.lock();
        g.was_established || (!g.active && self.comm_est_done.load(Ordering::Relaxed))
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> ConnState {
        self.inner.lock().state
    }

    /// Whether the connection is being set up or established: not ended,
    /// disconnecting, closing or closed. Work requests failing to post on a
    /// connection that is not open are a consequence of its teardown, not an
    /// error of their own.
    pub(crate) fn is_open(&self) -> bool {
        let g = self.inner.lock();
        !g.disconnecting
            && matches!(
                g.state,
                ConnState::Connecting
                    | ConnState::AddrResolved
                    | ConnState::RouteResolved
                    | ConnState::Established
            )
    }

    /// Whether a flushed work request fails the connection: it is established
    /// and this side has not disconnected. Its QP then went into error without
    /// a teardown, and the device may report only the flush (rxe flushes the
    /// very request that failed). Before `ESTABLISHED` the CM itself puts the
    /// QP into error (a reject, a failed accept) and its event, or the connect
    /// timeout, says why; after a disconnect or a close, flushes are the
    /// teardown's own.
    pub(crate) fn flush_is_failure(&self) -> bool {
        let g = self.inner.lock();
        !g.disconnecting && g.state == ConnState::Established
    }

    /// The ECE the peer sent (zero when it sent none).
    pub(crate) fn remote_ece(&self) -> Ece {
        self.inner.lock().remote_ece
    }

    /// What the QP really got, read back from the provider.
    pub(crate) fn qp_attrs(&self) -> Result<QpAttrs> {
        self.with_res(|res| res.query_qp())
    }

    /// Writes the peer's address and port as text into `buf`; `None` once the id
    /// is gone.
    pub(crate) fn peer<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str> {
        let g = self.inner.lock();
        let id = g.id.as_ref()?;
        // SAFETY: The id is live while the lock is held and `g.id` is `Some`; the
        // helper writes at most `buf.len()` bytes, NUL included.
        let n = unsafe {
            ffi::cmecho_cm_peer_addr(id.as_ptr(), buf.as_mut_ptr().cast(), buf.len() as c_int)
        };
        let n = usize::try_from(n).ok()?.min(buf.len() - 1);
        core::str::from_utf8(&buf[..n]).ok()
    }

    /// The route's PacketLifeTime exponent, once the route is final and where it
    /// has a path record.
    pub(crate) fn route_plt(&self) -> Option<u8> {
        let g = self.inner.lock();
        let id = g.id.as_ref().filter(|_| g.route_final)?;
        // SAFETY: The id is live while the lock is held and `g.id` is `Some`. Its
        // route is final: nothing frees or replaces the path record any more
        // before the id is destroyed, which needs this lock to take it.
        let plt = unsafe { ffi::cmecho_cm_route_plt(id.as_ptr()) };
        u8::try_from(plt).ok()
    }

    /// The route's traffic class, once the route is final and where it has a path
    /// record.
    pub(crate) fn route_tclass(&self) -> Option<u8> {
        let g = self.inner.lock();
        let id = g.id.as_ref().filter(|_| g.route_final)?;
        // SAFETY: As in `route_plt`.
        let tc = unsafe { ffi::cmecho_cm_route_tclass(id.as_ptr()) };
        u8::try_from(tc).ok()
    }

    /// Starts a disconnect; the QP flushes and the peer sees `DISCONNECTED`.
    /// The connection is no longer [open](Conn::is_open).
    pub(crate) fn disconnect(&self) {
        let mut g = self.inner.lock();
        g.disconnecting = true;
        if let Some(id) = &g.id {
            // SAFETY: The id is live while the lock is held and `g.id` is `Some`.
            // Its result only says whether the id was connected.
            let _ = unsafe { ffi::rdma_disconnect(id.as_ptr()) };
        }
    }

    /// Closes the connection from any context: disconnects, drains and destroys the
    /// QP, frees the buffers, destroys the id. The work runs on the module's
    /// workqueue, so this is safe in CM and completion handlers.
    pub(crate) fn close(&self) {
        let me = {
            let mut g = self.inner.lock();
            if matches!(g.state, ConnState::Closing | ConnState::Closed) {
                return;
            }
            g.state = ConnState::Closing;
            g.me.take()
        };
        // Wakes a `connect` in progress, which then fails with `ECONNABORTED`.
        self.changed.notify_all();
        if let Some(me) = me {
            // The work item is the connection's own: queuing allocates nothing.
            // It fails only with no workqueue (the module unloading, which
            // closes every connection with `close_and_wait` first) or queued
            // already (`me` is taken once): then that close does the work, and
            // `me` goes back for it.
            if let Err(me) = super::workqueue::enqueue::<_, CLOSE_WORK>(me) {
                self.inner.lock().me = Some(me);
                pr_warn!("cannot schedule a connection close\n");
            }
        }
    }

    /// Closes the connection and waits until it is closed.
    ///
    /// Process context only; `EDEADLK` from within any callback of this layer
    /// (a CM event of any id, `setup` and `accepted` on the passive side, a
    /// completion of any connection), from any [`Conn::with_res`] closure, and
    /// from this connection's own `setup` in [`Conn::connect`].
    /// Closing waits for the CM handlers (`rdma_destroy_id`), for `connect` or
    /// the accept's work item, and drains the completions: from a callback,
    /// two connections each closing the other would wait for each other.
    /// Callbacks use [`Conn::close`].
    pub(crate) fn close_and_wait(&self) -> Result {
        // Callbacks and `with_res` closures, on this very task, must not wait;
        // other threads wait, `rdma_destroy_id` letting a running handler finish.
        let me = current_task();
        {
            let g = self.inner.lock();
            if in_callback()
                || g.handler_task == me
                || (g.connecting && g.connect_task == me)
                || self.cq_task.load(Ordering::Relaxed) == me
                || self.res_task.load(Ordering::Relaxed) == me
            {
                return Err(EDEADLK);
            }
        }
        self.close_now();
        let mut g = self.inner.lock();
        while g.state != ConnState::Closed {
            // A concurrent close is finishing: wait for it. A pending signal
            // cannot cut this short (the close must finish), nor make it spin:
            // then the wait is uninterruptible, until the closer's wake-up.
            if let kernel::sync::CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(100))
            {
                if g.state != ConnState::Closed {
                    self.changed.wait(&mut g);
                }
            }
        }
        Ok(())
    }

    /// Releases everything this connection still owns, in the required order.
    fn close_now(&self) {
        let (id, res, sink, me) = {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            if g.state == ConnState::Closed || g.closer {
                return;
            }
            if g.connecting {
                // `connect` owns the id until it returns; it finishes the close.
                if g.state != ConnState::DeviceRemoved {
                    g.state = ConnState::Closing;
                }
                drop(g);
                self.changed.notify_all();
                return;
            }
            g.closer = true;
            g.state = ConnState::Closing;
            (g.id.take(), rg.take(), g.sink.take(), g.me.take())
        };
        if let Some(id) = &id {
            // SAFETY: We own the id (taken out of the shared state above).
            let _ = unsafe { ffi::rdma_disconnect(id.as_ptr()) };
        }
        if let Some(res) = res {
            // SAFETY: The id under the resources is destroyed only below; this is
            // no completion of theirs (`close_and_wait` refuses one, `close` defers).
            unsafe { res.destroy() };
        }
        if let Some(id) = id {
            id.destroy();
        }
        if let Some(sink) = sink {
            // SAFETY: The id that used the sink as its context is destroyed.
            unsafe { sink.free() };
        }
        let mut g = self.inner.lock();
        g.state = ConnState::Closed;
        drop(g);
        self.changed.notify_all();
        // The callers hold their own reference: this never drops `self`.
        drop(me);
    }

    /// Records an event's state, unless the connection is already closing.
    fn set_state(&self, state: ConnState) {
        {
            let mut g = self.inner.lock();
            if matches!(g.state, ConnState::Closing | ConnState::Closed) {
                return;
            }
            g.state = state;
        }
        self.changed.notify_all();
    }

    /// Marks the connection ended; true the first time, if it was established.
    fn end_once(&self) -> bool {
        let mut g = self.inner.lock();
        let first = !g.ended && g.state == ConnState::Established;
        g.ended = true;
        first
    }

    /// After a failure or disconnect event: an established connection's handler
    /// learns that it ended (and closes it); one that never got established and
    /// that no `connect` is waiting for (an accepted connection whose peer went
    /// away before the RTU, or rejected it) is closed here, so that its QP and
    /// buffers go at once instead of when the listener's owner stops.
    fn after_end(&self, first: bool) {
        if first {
            self.handler.ended(self, EndReason::Disconnected);
        } else if !self.inner.lock().connecting {
            self.close();
        }
    }

    /// Handles DEVICE_REMOVAL: decides who destroys the id, and takes it, in one
    /// critical section.
    ///
    /// - `connect` is using the id: it sees the state, fails, and destroys the QP
    ///   and the id itself, which the CM waits for ([`Verdict::Keep`]). If
    ///   `ESTABLISHED` came, `connect` succeeds, and the handler learns of the
    ///   end here ([`ConnHandler::ended`]).
    /// - A close took the id already and is destroying it; `rdma_destroy_id`
    ///   waits for this handler ([`Verdict::Keep`]).
    /// - Otherwise this path takes the id, the QP resources and the sink, releases
    ///   the resources and gives the id back to the CM ([`Verdict::DestroyId`]):
    ///   a close that comes later finds nothing to release.
    fn device_removed(&self, ev: &EventId) -> Verdict {
        let (id, res, sink, established, never) = {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            if g.connecting {
                // Established already, `connect` will succeed: the handler
                // learns here that the connection ended, as it would once
                // `connect` returned.
                let first = !g.ended && g.state == ConnState::Established;
                g.ended |= first;
                if !matches!(g.state, ConnState::Closing | ConnState::Closed) {
                    g.state = ConnState::DeviceRemoved;
                }
                drop(g);
                drop(rg);
                self.changed.notify_all();
                if first {
                    self.handler.ended(self, EndReason::DeviceRemoval);
                }
                return Verdict::Keep;
            }
            let Some(id) = g.id.take() else {
                return Verdict::Keep;
            };
            let established = g.state == ConnState::Established;
            let never = !g.was_established;
            if !matches!(g.state, ConnState::Closing | ConnState::Closed) {
                g.state = ConnState::DeviceRemoved;
            }
            (id, rg.take(), g.sink.take(), established, never)
        };
        if let Some(res) = res {
            // SAFETY: The id is handed back only below; a CM handler is not a
            // completion, so draining is allowed here.
            unsafe { res.destroy() };
        }
        // The sink goes with the id: the entry point frees it once the CM has
        // the id.
        let verdict = give_back(id, ev, sink);
        self.changed.notify_all();
        let first = {
            let mut g = self.inner.lock();
            let first = !g.ended && established;
            g.ended = true;
            first
        };
        if first {
            self.handler.ended(self, EndReason::DeviceRemoval);
        } else if never {
            // Accepted, never established, and no `connect` waits for it: as
            // after a reject (`after_end`), nobody else would close it, and it
            // would hold its place until the listener's owner stops.
            self.close();
        }
        verdict
    }

    /// A work request of this accepted connection completed before
    /// `ESTABLISHED`: the peer's QP talks to ours, so the connection is
    /// established whether or not the peer's RTU arrived (it may be lost, or
    /// late behind a burst of other connections' messages). Tells the CM so,
    /// once (`rdma_notify` with `IB_EVENT_COMM_EST`, what a provider's QP
    /// event would have a ULP do; rxe raises none): it then delivers
    /// `ESTABLISHED` as if the RTU had come, and a server's deadline for the
    /// RTU does not close a connection that already carries data.
    fn comm_est(&self) {
        let g = self.inner.lock();
        if g.active || g.was_established || g.state != ConnState::Connecting {
            return;
        }
        let Some(id) = &g.id else {
            return;
        };
        self.comm_est_done.store(true, Ordering::Relaxed);
        // SAFETY: The id is live while the lock is held and `g.id` is `Some`.
        // The call takes only the CM's spinlocks and queues the event; it
        // fails harmlessly where the CM state is not waiting for the RTU.
        let _ = unsafe { ffi::rdma_notify(id.as_ptr(), ffi::IB_EVENT_COMM_EST) };
    }
}

impl_has_work! {
    impl{H: ConnHandler} HasWork<Self, CLOSE_WORK> for Conn<H> { self.close_work }
    impl{H: ConnHandler} HasWork<Self, ACCEPT_WORK> for Conn<H> { self.accept_work }
}

impl<H: ConnHandler> WorkItem<CLOSE_WORK> for Conn<H> {
    type Pointer = Arc<Self>;

    /// The deferred half of [`Conn::close`], with the reference the close took
    /// out of `me`.
    fn run(this: Arc<Self>) {
        this.close_now();
    }
}

impl<H: ConnHandler> WorkItem<ACCEPT_WORK> for Conn<H> {
    type Pointer = Arc<Self>;

    /// The deferred half of an accept ([`Conn::accept_later`]).
    fn run(this: Arc<Self>) {
        this.accept_deferred();
    }
}

/// The `struct rdma_conn_param` of a connect or an accept: zeroed (no SRQ, QP
/// number or Q_Key, which the id's own QP supplies), with the responder
/// resources, initiator depth and RNR retry count of `p`, `retry_count`, and
/// `data` as the private data: the result points to `data`, which must outlive
/// its use.
fn cm_conn_param(p: &ConnParams, retry_count: u8, data: &PrivateData) -> ffi::rdma_conn_param {
    let bytes = data.as_bytes();
    ffi::rdma_conn_param {
        private_data: bytes.as_ptr().cast(),
        // At most `PrivateData::MAX`: fits.
        private_data_len: bytes.len() as u8,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        retry_count,
        rnr_retry_count: p.rnr_retry_count.get(),
        ..Zeroable::zeroed()
    }
}

/// The `struct rdma_ucm_ece` of a connect or an accept: `p`'s ECE, or zeros
/// (none) when it has none.
fn cm_ece(p: &ConnParams) -> ffi::rdma_ucm_ece {
    let ece = p.ece.unwrap_or_default();
    ffi::rdma_ucm_ece {
        vendor_id: ece.vendor_id,
        attr_mod: ece.attr_mod,
    }
}

impl<H: ConnHandler> CmEvents for Conn<H> {
    fn cm_event(&self, id: &EventId, ev: &Event) -> Verdict {
        self.inner.lock().handler_task = current_task();
        let verdict = match ev.kind {
            EventKind::AddrResolved => {
                self.set_state(ConnState::AddrResolved);
                Verdict::Keep
            }
            EventKind::RouteResolved => {
                self.inner.lock().route_final = true;
                self.set_state(ConnState::RouteResolved);
                Verdict::Keep
            }
            EventKind::Established => {
                {
                    let mut g = self.inner.lock();
                    if g.remote_ece == Ece::default() {
                        g.remote_ece = ev.ece;
                    }
                    g.was_established = true;
                    self.comm_est_done.store(true, Ordering::Relaxed);
                }
                self.set_state(ConnState::Established);
                self.handler.established(self);
                Verdict::Keep
            }
            EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected => {
                if ev.kind == EventKind::Rejected {
                    self.inner.lock().reject_data = ev.private_data;
                }
                let first = self.end_once();
                self.set_state(ConnState::Failed(ev.kind, ev.status));
                self.after_end(first);
                Verdict::Keep
            }
            EventKind::Disconnected => {
                let first = self.end_once();
                self.set_state(ConnState::Disconnected);
                self.after_end(first);
                Verdict::Keep
            }
            EventKind::DeviceRemoval => self.device_removed(id),
            _ => Verdict::Keep,
        };
        self.inner.lock().handler_task = 0;
        verdict
    }
}

impl<H: ConnHandler> Completion for Conn<H> {
    fn complete(&self, _from: FromCq, tag: u32, status: Result<u32, WcError>) {
        if status.is_ok() && !self.comm_est_done.load(Ordering::Relaxed) {
            self.comm_est();
        }
        let _scope = Scope::enter(0);
        self.cq_task.store(current_task(), Ordering::Relaxed);
        self.handler.completion(self, tag, status);
        self.cq_task.store(0, Ordering::Relaxed);
    }
}
