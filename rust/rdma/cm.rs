// SPDX-License-Identifier: GPL-2.0

//! RDMA CM connections in which the connection parameters are set in time.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! # The ordering guarantee
//!
//! `rdma_set_ack_timeout()` only has an effect when it is called before
//! `rdma_resolve_route()` (RoCE then derives the route's PacketLifeTime from it),
//! before `rdma_connect()` on the active side, and on the *new* id of a connect
//! request before `rdma_accept()` on the passive side; the new id does not inherit
//! the listener's value. The C API checks none of this: called late, it silently
//! does nothing. The same holds for `rdma_set_min_rnr_timer()` and
//! `rdma_set_service_type()`.
//!
//! This module makes the right order the only one a caller can write:
//!
//! - Every knob travels in one [`ConnParams`] value, handed once to
//!   [`Conn::connect`] (active side) or [`Listener::listen`] (passive side).
//! - No type here exposes the CM id or a setter: after `connect` or `listen`
//!   returns there is no way left to change a parameter.
//! - [`Conn::connect`] applies the ack timeout, min RNR timer and type of service
//!   right after creating the id, before `rdma_resolve_addr()` and so before
//!   `rdma_resolve_route()` and `rdma_connect()`. Retry counts, depths and ECE go
//!   with the connect itself.
//! - [`Listener`] applies them to each new id inside its `CONNECT_REQUEST` event,
//!   before the QP is created and before `rdma_accept()`, which runs in that same
//!   event with the handler mutex held, as the CM requires.
//!
//! The module also keeps the CM's other rules: ids are never destroyed from their
//! own event handler ([`Conn::close`] defers to the module's workqueue), and on
//! `DEVICE_REMOVAL` a connection releases its QP resources and hands its id back
//! to the CM for destruction, so removing a device never waits on cmecho.
//!
//! # Lock order
//!
//! Outermost first (lockdep class names in parentheses):
//!
//! 1. The CM's `handler_mutex` of an id: held by the CM while [`ConnHandler`]
//!    and [`ListenHandler`] methods run (for a connect request, the listener's
//!    and then the new id's); taken by `rdma_connect` and, in effect, by
//!    `rdma_destroy_id`, which waits for it.
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
//! layer and any [`Conn::with_res`] closure, and [`Listener::stop`] defers its
//! work from them: a callback waiting for another's handler or completion,
//! while that one waits for it, is a cycle no lock order shows. `with_res`
//! does not nest, so two `cmecho_conn_res` are never held at once.

use super::ffi;
use super::params::{AckTimeout, Ece, MinRnrTimer, RetryCount};
use super::verbs::{self, QpAttrs, QpConfig, WcError};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::error::from_err_ptr;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::msecs_to_jiffies;

/// The parameters of an RC connection, given once, up front.
///
/// The layer applies each at its required moment (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnParams {
    /// Local ACK timeout; `None` leaves the CM's default (RoCE: PacketLifeTime + 1).
    pub(crate) ack_timeout: Option<AckTimeout>,
    /// Minimum RNR NAK timer of the local QP; `None` leaves the provider default.
    pub(crate) min_rnr_timer: Option<MinRnrTimer>,
    /// Transport retry count (active side; the passive side takes the peer's).
    pub(crate) retry_count: RetryCount,
    /// RNR retry count.
    pub(crate) rnr_retry_count: RetryCount,
    /// ECE offered with the connect, or answered with the accept.
    pub(crate) ece: Option<Ece>,
    /// Outstanding RDMA READs this side may issue.
    pub(crate) initiator_depth: u8,
    /// Outstanding RDMA READs this side accepts from the peer.
    pub(crate) responder_resources: u8,
    /// Type of service (RoCE traffic class); `None` leaves the default.
    pub(crate) tos: Option<u8>,
    /// How long one attempt at address or route resolution may take, in ms
    /// (active side).
    pub(crate) resolve_timeout_ms: u32,
    /// Attempts at address or route resolution repeated after one timed out
    /// (active side): a neighbour still being resolved is not a failure.
    pub(crate) resolve_retries: u8,
}

impl ConnParams {
    /// The parameters rping uses: retry and RNR retry 7, depth 1, nothing else set.
    pub(crate) fn rping() -> Self {
        Self {
            ack_timeout: None,
            min_rnr_timer: None,
            retry_count: RetryCount::INFINITE,
            rnr_retry_count: RetryCount::INFINITE,
            ece: None,
            initiator_depth: 1,
            responder_resources: 1,
            tos: None,
            resolve_timeout_ms: RESOLVE_TIMEOUT_MS,
            resolve_retries: RESOLVE_RETRIES,
        }
    }
}

/// A reference on a network namespace.
///
/// # Invariants
///
/// `self.0` points to a `struct net` on which this value holds one reference.
pub(crate) struct NetNs(NonNull<ffi::Net>);

// SAFETY: A reference on a `struct net` may be used and dropped from any thread.
unsafe impl Send for NetNs {}
// SAFETY: `NetNs` only allows reading through a shared reference.
unsafe impl Sync for NetNs {}

impl NetNs {
    /// Takes a reference on the network namespace of the calling task.
    pub(crate) fn current() -> Result<Self> {
        // SAFETY: In process context `current` has an nsproxy with a network namespace.
        let net = unsafe { ffi::cmecho_net_get_current() };
        // INVARIANT: `get_net()` returned the namespace with a reference taken.
        Ok(Self(NonNull::new(net).ok_or(EINVAL)?))
    }

    /// The namespace's inode number, as `ip netns identify` and `/proc/*/ns/net` show it.
    pub(crate) fn inum(&self) -> u32 {
        // SAFETY: By the type invariant `self.0` is a valid `struct net`.
        unsafe { ffi::cmecho_net_inum(self.0.as_ptr()) }
    }

    /// Whether `addr` is exactly one IPv4 or IPv6 address, nothing after it, with
    /// an optional `%scope` naming an interface of this namespace.
    pub(crate) fn valid_addr(&self, addr: &CStr) -> bool {
        // SAFETY: By the type invariant `self.0` is a valid `struct net`; `addr` is
        // a valid NUL-terminated string, which the helper only reads.
        unsafe { ffi::cmecho_parse_addr(self.0.as_ptr(), addr.as_char_ptr()) == 0 }
    }

    fn as_ptr(&self) -> *mut ffi::Net {
        self.0.as_ptr()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this value owns one reference.
        unsafe { ffi::cmecho_net_put(self.0.as_ptr()) };
    }
}

/// A CM event, decoded from `struct rdma_cm_event`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    /// What happened.
    pub(crate) kind: EventKind,
    /// The event's status (a negative errno, or the IB CM reject reason).
    pub(crate) status: i32,
    /// The peer's ECE, where the event carries one.
    pub(crate) ece: Ece,
    /// The peer's initiator depth, on a connect request.
    pub(crate) initiator_depth: u8,
    /// The peer's responder resources, on a connect request.
    pub(crate) responder_resources: u8,
}

/// The CM events cmecho distinguishes (`enum rdma_cm_event_type`, mapped in C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`.
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`.
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// Any other event (multicast, address change, connect response).
    Other,
}

impl EventKind {
    fn from_code(code: c_int) -> Self {
        match code {
            ffi::CMECHO_EV_ADDR_RESOLVED => Self::AddrResolved,
            ffi::CMECHO_EV_ADDR_ERROR => Self::AddrError,
            ffi::CMECHO_EV_ROUTE_RESOLVED => Self::RouteResolved,
            ffi::CMECHO_EV_ROUTE_ERROR => Self::RouteError,
            ffi::CMECHO_EV_CONNECT_REQUEST => Self::ConnectRequest,
            ffi::CMECHO_EV_CONNECT_ERROR => Self::ConnectError,
            ffi::CMECHO_EV_UNREACHABLE => Self::Unreachable,
            ffi::CMECHO_EV_REJECTED => Self::Rejected,
            ffi::CMECHO_EV_ESTABLISHED => Self::Established,
            ffi::CMECHO_EV_DISCONNECTED => Self::Disconnected,
            ffi::CMECHO_EV_DEVICE_REMOVAL => Self::DeviceRemoval,
            ffi::CMECHO_EV_TIMEWAIT_EXIT => Self::TimewaitExit,
            _ => Self::Other,
        }
    }

    /// The event's name, as the CM calls it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::AddrResolved => "ADDR_RESOLVED",
            Self::AddrError => "ADDR_ERROR",
            Self::RouteResolved => "ROUTE_RESOLVED",
            Self::RouteError => "ROUTE_ERROR",
            Self::ConnectRequest => "CONNECT_REQUEST",
            Self::ConnectError => "CONNECT_ERROR",
            Self::Unreachable => "UNREACHABLE",
            Self::Rejected => "REJECTED",
            Self::Established => "ESTABLISHED",
            Self::Disconnected => "DISCONNECTED",
            Self::DeviceRemoval => "DEVICE_REMOVAL",
            Self::TimewaitExit => "TIMEWAIT_EXIT",
            Self::Other => "OTHER",
        }
    }
}

impl Event {
    /// Decodes an event.
    ///
    /// # Safety
    ///
    /// `ev` must point to a valid `struct rdma_cm_event`.
    unsafe fn read(ev: *const ffi::RdmaCmEvent) -> Self {
        // SAFETY: The caller guarantees `ev` is valid; the helpers only read it.
        unsafe {
            Self {
                kind: EventKind::from_code(ffi::cmecho_ev_type(ev)),
                status: ffi::cmecho_ev_status(ev),
                ece: Ece {
                    vendor_id: ffi::cmecho_ev_ece_vendor_id(ev),
                    attr_mod: ffi::cmecho_ev_ece_attr_mod(ev),
                },
                initiator_depth: ffi::cmecho_ev_initiator_depth(ev),
                responder_resources: ffi::cmecho_ev_responder_resources(ev),
            }
        }
    }
}

/// What an event handler asks of the CM once it returns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Keep the id.
    Keep,
    /// The handler gave the id up: the CM destroys it after the handler returns.
    DestroyId,
}

/// The receiver of a CM id's events; what the id's context points to, boxed.
trait CmEvents: Send + Sync {
    /// Handles one event of `id`, in the CM's handler context (handler mutex held).
    fn cm_event(&self, id: *mut ffi::RdmaCmId, ev: &Event) -> Verdict;
}

/// The boxed receiver an id's `context` points to.
type Sink = Arc<dyn CmEvents>;

/// A pointer to a [`Sink`] made by [`KBox::into_raw`].
///
/// # Invariants
///
/// `self.0` came from `KBox::<Sink>::into_raw` and is freed at most once.
struct SinkPtr(NonNull<Sink>);

// SAFETY: The box holds an `Arc<dyn CmEvents>`, which is `Send + Sync`.
unsafe impl Send for SinkPtr {}

impl SinkPtr {
    fn new(sink: Sink) -> Result<Self> {
        let b = KBox::new(sink, GFP_KERNEL)?;
        // INVARIANT: The pointer comes from `KBox::into_raw`.
        Ok(Self(NonNull::new(KBox::into_raw(b)).ok_or(ENOMEM)?))
    }

    fn as_ctx(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    /// Frees the box.
    ///
    /// # Safety
    ///
    /// No CM id may use the box as its context any more.
    unsafe fn free(self) {
        // SAFETY: By the type invariant the pointer came from `KBox::into_raw` and,
        // since `self` is consumed, is freed only here.
        drop(unsafe { KBox::from_raw(self.0.as_ptr()) });
    }
}

/// An owned `struct rdma_cm_id`.
///
/// # Invariants
///
/// `self.0` is a live CM id owned by this value, destroyed at most once.
pub(super) struct IdPtr(NonNull<ffi::RdmaCmId>);

// SAFETY: A CM id may be used and destroyed from any thread.
unsafe impl Send for IdPtr {}

impl IdPtr {
    /// Creates an RC id whose events go to `sink`.
    fn create(net: &NetNs, sink: &SinkPtr) -> Result<Self> {
        // SAFETY: `net` holds a reference on the namespace; the sink stays valid until
        // the id is destroyed (its owner frees it only after that).
        let id = from_err_ptr(unsafe { ffi::cmecho_cm_create_id(net.as_ptr(), sink.as_ctx()) })?;
        // INVARIANT: `rdma_create_id()` succeeded: the id is live and ours.
        Ok(Self(NonNull::new(id).ok_or(ENOMEM)?))
    }

    pub(super) fn as_ptr(&self) -> *mut ffi::RdmaCmId {
        self.0.as_ptr()
    }

    /// Destroys the id; waits for a running handler of it to return.
    ///
    /// Must not be called from the id's own event handler.
    fn destroy(self) {
        // SAFETY: By the type invariant the id is live; consuming `self` makes this
        // the only destruction. The callers never run in this id's handler.
        unsafe { ffi::cmecho_cm_destroy_id(self.as_ptr()) };
    }

    /// Gives the id to the CM, which destroys it when the running handler returns.
    fn hand_back(self) {}

    /// Applies the parameters that must precede route resolution and connect or accept.
    fn apply_early(&self, p: &ConnParams) -> Result<(), StepError> {
        if let Some(t) = p.ack_timeout {
            // SAFETY: The id is live by the type invariant.
            to_step("set_ack_timeout", unsafe {
                ffi::cmecho_cm_set_ack_timeout(self.as_ptr(), t.exponent())
            })?;
        }
        if let Some(t) = p.min_rnr_timer {
            // SAFETY: The id is live by the type invariant.
            to_step("set_min_rnr_timer", unsafe {
                ffi::cmecho_cm_set_min_rnr_timer(self.as_ptr(), t.code())
            })?;
        }
        if let Some(tos) = p.tos {
            // SAFETY: The id is live by the type invariant.
            unsafe { ffi::cmecho_cm_set_tos(self.as_ptr(), tos) };
        }
        Ok(())
    }
}

/// A failed step of connection setup: which CM call, and the errno or CM status.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepError {
    /// The step, named after the CM call or event.
    pub(crate) step: &'static str,
    /// The error.
    pub(crate) err: Error,
    /// The CM event's status where the failure came as an event (e.g. a reject reason).
    pub(crate) status: Option<i32>,
    /// The CM's description of a reject reason.
    pub(crate) reject_msg: Option<&'static CStr>,
    /// How many times the step was attempted (more than one after timeouts).
    pub(crate) attempts: u8,
}

impl From<StepError> for Error {
    fn from(e: StepError) -> Error {
        e.err
    }
}

fn to_step(step: &'static str, ret: c_int) -> Result<(), StepError> {
    if ret < 0 {
        Err(StepError {
            step,
            err: Error::from_errno(ret),
            status: None,
            reject_msg: None,
            attempts: 1,
        })
    } else {
        Ok(())
    }
}

fn step_err(step: &'static str, err: Error) -> StepError {
    StepError {
        step,
        err,
        status: None,
        reject_msg: None,
        attempts: 1,
    }
}

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
/// handler context or the CQ's workqueue. None may wait for the connection to close
/// ([`Conn::close`] is fine: it defers).
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

impl ConnState {
    /// The state's name, as configfs shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::AddrResolved => "addr_resolved",
            Self::RouteResolved => "route_resolved",
            Self::Established => "established",
            Self::Failed(..) => "failed",
            Self::Disconnected => "disconnected",
            Self::DeviceRemoved => "device_removed",
            Self::Closing => "closing",
            Self::Closed => "closed",
        }
    }
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
    /// The task running this connection's CM event handler, if one runs (as an
    /// address, compared only with `current`).
    handler_task: usize,
    ended: bool,
    /// A `close_now` is releasing the resources; others wait for `Closed`.
    closer: bool,
    /// [`Conn::connect`] is running, or a [`Listener`] is accepting the
    /// connection: it alone may destroy the id meanwhile.
    connecting: bool,
    /// The task running [`Conn::connect`] (as an address, compared only with
    /// `current`): `setup` runs on it.
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
}

/// One RC connection: a CM id with its QP, CQ, PD and buffers.
///
/// Created by [`Conn::connect`] (active side) or by a [`Listener`] (passive side);
/// released by [`Conn::close`].
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
    params: ConnParams,
    #[pin]
    handler: H,
}

/// How long one attempt at address or route resolution may take, by default.
pub(crate) const RESOLVE_TIMEOUT_MS: u32 = 2000;
/// Resolution attempts repeated after a timeout, by default.
pub(crate) const RESOLVE_RETRIES: u8 = 3;
/// How much longer than the CM's own resolution timeout to wait for its event.
const RESOLVE_SLACK_MS: u32 = 1000;
/// How long connection establishment may take.
const CONNECT_TIMEOUT_MS: u32 = 30_000;

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
                }, "cmecho_conn_inner"),
                changed <- new_condvar!("cmecho_conn_changed"),
                cq_task: AtomicUsize::new(0),
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
        Ok(conn)
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
        let timeout = self.params.resolve_timeout_ms;
        self.resolve("rdma_resolve_addr", ConnState::AddrResolved, |id| {
            // SAFETY: `connect_call` passes a live id (see there).
            unsafe {
                ffi::cmecho_cm_resolve_addr(
                    id,
                    net.as_ptr(),
                    addr.as_char_ptr(),
                    port,
                    timeout as c_int,
                )
            }
        })?;

        self.step(ConnectStep::ResolveRoute)?;
        self.resolve("rdma_resolve_route", ConnState::RouteResolved, |id| {
            // SAFETY: As above.
            unsafe { ffi::cmecho_cm_resolve_route(id, timeout as c_int) }
        })?;

        self.step(ConnectStep::CreateQp)?;
        self.create_res(qp)
            .map_err(|e| step_err("rdma_create_qp", e))?;
        self.handler.setup(self).map_err(|e| step_err("setup", e))?;

        self.step(ConnectStep::Connect)?;
        let p = &self.params;
        let ece = p.ece.unwrap_or_default();
        self.connect_call("rdma_connect", |id| {
            // SAFETY: As above. The ack timeout was applied before route resolution.
            unsafe {
                ffi::cmecho_cm_connect(
                    id,
                    p.responder_resources,
                    p.initiator_depth,
                    p.retry_count.get(),
                    p.rnr_retry_count.get(),
                    ece.vendor_id,
                    ece.attr_mod,
                )
            }
        })?;
        self.wait_for(ConnState::Established, "rdma_connect", CONNECT_TIMEOUT_MS)
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
        let mut attempts = 1u8;
        loop {
            self.connect_call(step, &call)?;
            match self.wait_for(want, step, wait_ms) {
                Err(_) if attempts <= p.resolve_retries && self.retry_after_timeout() => {
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
    /// Process context only, never in one of this connection's handlers.
    #[allow(
        dead_code,
        reason = "API for ULPs; samples/cmtime uses it, cmecho.ko does not"
    )]
    pub(crate) fn disconnect_and_wait(&self, ms: u32) -> Result<(), StepError> {
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
                                CStr::from_char_ptr(ffi::cmecho_reject_msg(id.as_ptr(), status))
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
            let _ = unsafe { ffi::cmecho_cm_disconnect(id.as_ptr()) };
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
            let spawned = super::spawn(move || me.close_now()).is_ok();
            if !spawned {
                // The next `close_and_wait` does the work instead.
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
    /// Closing waits for the CM handlers (`rdma_destroy_id`) and for `connect`,
    /// and drains the completions: from a callback, two connections each
    /// closing the other would wait for each other. Callbacks use
    /// [`Conn::close`].
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
            let _ = unsafe { ffi::cmecho_cm_disconnect(id.as_ptr()) };
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
    ///   and the id itself, which the CM waits for ([`Verdict::Keep`]).
    /// - A close took the id already and is destroying it; `rdma_destroy_id`
    ///   waits for this handler ([`Verdict::Keep`]).
    /// - Otherwise this path takes the id, the QP resources and the sink, releases
    ///   the resources and gives the id back to the CM ([`Verdict::DestroyId`]):
    ///   a close that comes later finds nothing to release.
    fn device_removed(&self) -> Verdict {
        let (id, res, sink, was_established) = {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            if g.connecting {
                if !matches!(g.state, ConnState::Closing | ConnState::Closed) {
                    g.state = ConnState::DeviceRemoved;
                }
                drop(g);
                self.changed.notify_all();
                return Verdict::Keep;
            }
            let Some(id) = g.id.take() else {
                return Verdict::Keep;
            };
            let was_established = g.state == ConnState::Established;
            if !matches!(g.state, ConnState::Closing | ConnState::Closed) {
                g.state = ConnState::DeviceRemoved;
            }
            (id, rg.take(), g.sink.take(), was_established)
        };
        if let Some(res) = res {
            // SAFETY: The id is handed back only below; a CM handler is not a
            // completion, so draining is allowed here.
            unsafe { res.destroy() };
        }
        id.hand_back();
        // Not freed here: the trampoline frees the box once the CM has the id.
        let _freed_by_trampoline = sink;
        self.changed.notify_all();
        let first = {
            let mut g = self.inner.lock();
            let first = !g.ended && was_established;
            g.ended = true;
            first
        };
        if first {
            self.handler.ended(self, EndReason::DeviceRemoval);
        }
        Verdict::DestroyId
    }
}

impl<H: ConnHandler> CmEvents for Conn<H> {
    fn cm_event(&self, _id: *mut ffi::RdmaCmId, ev: &Event) -> Verdict {
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
            EventKind::DeviceRemoval => self.device_removed(),
            _ => Verdict::Keep,
        };
        self.inner.lock().handler_task = 0;
        verdict
    }
}

/// The calling task, as an address for comparisons only.
fn current_task() -> usize {
    kernel::task::Task::current_raw() as usize
}

/// How many tasks running a callback of this layer, or a [`Conn::with_res`]
/// closure, are tracked at once.
const SCOPE_SLOTS: usize = 128;

/// The low bit of a [`SCOPES`] entry: its task runs a [`Conn::with_res`]
/// closure (a task's address is aligned, so the bit is free).
const WITH_RES: usize = 1;

/// The tasks running a callback of this layer (a CM event of any cmecho id, a
/// completion of any connection) or a [`Conn::with_res`] closure, as addresses
/// compared only with `current`: the calls that wait for CM handlers or
/// completions refuse them, and `with_res` refuses its own closures.
static SCOPES: [AtomicUsize; SCOPE_SLOTS] = [const { AtomicUsize::new(0) }; SCOPE_SLOTS];

/// The calling task in [`SCOPES`] while this lives.
///
/// Beyond [`SCOPE_SLOTS`] tasks at once a scope is not tracked; each
/// connection's and listener's own tasks still are (`handler_task`,
/// `cq_task`, `res_task`, `handler_tasks`).
struct Scope(Option<usize>);

impl Scope {
    /// A callback's scope (`kind` 0) or a `with_res` closure's ([`WITH_RES`]).
    fn enter(kind: usize) -> Self {
        let me = current_task() | kind;
        // A load first: a failed exchange would still take the cache line.
        let slot = SCOPES.iter().position(|t| {
            t.load(Ordering::Relaxed) == 0
                && t.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        });
        Self(slot)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            SCOPES[i].store(0, Ordering::Relaxed);
        }
    }
}

/// Whether the calling task runs a callback of this layer or a
/// [`Conn::with_res`] closure. Only the task itself stores its own address, so
/// relaxed loads see what it stored.
fn in_callback() -> bool {
    let me = current_task();
    SCOPES
        .iter()
        .any(|t| t.load(Ordering::Relaxed) & !WITH_RES == me)
}

/// Whether the calling task runs a [`Conn::with_res`] closure.
fn in_with_res() -> bool {
    let me = current_task() | WITH_RES;
    SCOPES.iter().any(|t| t.load(Ordering::Relaxed) == me)
}

impl<H: ConnHandler> verbs::Completion for Conn<H> {
    fn complete(&self, _from: verbs::FromCq, tag: u32, status: Result<u32, WcError>) {
        let _scope = Scope::enter(0);
        self.cq_task.store(current_task(), Ordering::Relaxed);
        self.handler.completion(self, tag, status);
        self.cq_task.store(0, Ordering::Relaxed);
    }
}

/// Entry point of every CM event of every cmecho id (called by `rust/helpers/cm.c`).
///
/// # Safety
///
/// `ctx` must be null or the context of a cmecho id (a [`SinkPtr`]), `id` a live id
/// and `ev` a valid event, in the CM's handler context.
#[no_mangle]
unsafe extern "C" fn cmecho_rs_cm_event(
    ctx: *mut c_void,
    id: *mut ffi::RdmaCmId,
    ev: *mut ffi::RdmaCmEvent,
) -> c_int {
    if ctx.is_null() {
        return 0;
    }
    let _scope = Scope::enter(0);
    // SAFETY: The caller guarantees `ev` is valid.
    let event = unsafe { Event::read(ev) };
    // SAFETY: A non-null context of a cmecho id is a live `SinkPtr` box; its owner
    // frees it only after destroying the id, which waits for this handler.
    let sink: Sink = unsafe { &*ctx.cast::<Sink>() }.clone();
    let verdict = sink.cm_event(id, &event);
    if verdict == Verdict::DestroyId {
        if event.kind != EventKind::ConnectRequest {
            // The id's own sink: the CM destroys the id when we return, so nothing
            // uses the box after this.
            // SAFETY: `ctx` is the id's `SinkPtr`, forgotten by its owner in
            // `device_removed` or `Listener::cm_event` before returning `DestroyId`.
            unsafe { SinkPtr(NonNull::new_unchecked(ctx.cast())).free() };
        }
        return 1;
    }
    0
}

/// A connect request, as the passive side's [`ListenHandler`] sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectRequest {
    /// The ECE the peer offered (zero when none).
    pub(crate) remote_ece: Ece,
    /// The peer's initiator depth.
    pub(crate) initiator_depth: u8,
    /// The peer's responder resources.
    pub(crate) responder_resources: u8,
}

/// Why a connect request is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// `IB_CM_REJ_CONSUMER_DEFINED`: the ULP says no (e.g. too many connections).
    Consumer,
    /// `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`: the ECE offered is not acceptable.
    VendorOptionNotSupported,
}

/// The ULP side of a listener.
pub(crate) trait ListenHandler: Send + Sync + 'static {
    /// The handler type of accepted connections.
    type Conn: ConnHandler;

    /// The QP each accepted connection gets.
    fn qp_config(&self) -> QpConfig;

    /// Decides on a connect request: a connection handler to accept, or a reason to
    /// reject, with the ECE to answer when accepting.
    fn connect_request(
        &self,
        req: &ConnectRequest,
    ) -> Result<(impl PinInit<Self::Conn, Error>, Option<Ece>), RejectReason>;

    /// A connection was accepted; it is the ULP's to close.
    fn accepted(&self, conn: Arc<Conn<Self::Conn>>);

    /// Accepting a request failed at `err.step`.
    fn accept_failed(&self, err: StepError);

    /// The listener's device was removed; the listener no longer listens.
    fn removed(&self);
}

/// State of a listener protected by [`Listener::inner`].
struct ListenInner {
    id: Option<IdPtr>,
    sink: Option<SinkPtr>,
    /// [`Listener::listen`] is calling `rdma_listen` on the id, without this
    /// lock: a device removal meanwhile leaves the id to it.
    starting: bool,
    /// A device removal came while `starting`: `listen` stops the listener.
    removed: bool,
    /// The tasks running this listener's CM event handler (as addresses,
    /// compared only with `current`; 0 is a free slot). A wildcard listener's
    /// per-device ids deliver connect requests concurrently, one task each.
    handler_tasks: [usize; LISTEN_HANDLER_SLOTS],
}

/// Concurrent event handlers of one listener whose tasks are recorded: more run
/// only with more RDMA devices than this under one wildcard listener.
const LISTEN_HANDLER_SLOTS: usize = 8;

/// A listening CM id that accepts connections with the given parameters.
///
/// It listens until [`Listener::stop`] or a device removal: the id's context
/// holds a reference on it until then, so its owner must stop it. Accepted
/// connections are unaffected.
#[pin_data(PinnedDrop)]
pub(crate) struct Listener<L: ListenHandler> {
    #[pin]
    inner: Mutex<ListenInner>,
    params: ConnParams,
    handler: L,
}

impl<L: ListenHandler> Listener<L> {
    /// Listens on `addr`:`port` in namespace `net`.
    ///
    /// `params` are applied to each new connection id inside its connect request,
    /// before its QP is created and before it is accepted.
    pub(crate) fn listen(
        net: &NetNs,
        addr: &CStr,
        port: u16,
        params: ConnParams,
        handler: L,
    ) -> Result<Arc<Self>, StepError> {
        let l = Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(
                    ListenInner {
                        id: None,
                        sink: None,
                        starting: true,
                        removed: false,
                        handler_tasks: [0; LISTEN_HANDLER_SLOTS],
                    },
                    "cmecho_listener_inner"
                ),
                params,
                handler,
            }),
            GFP_KERNEL,
        )
        .map_err(|e| step_err("alloc", e))?;
        let sink = SinkPtr::new(l.clone()).map_err(|e| step_err("alloc", e))?;
        let id = match IdPtr::create(net, &sink) {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: No id was created with this sink.
                unsafe { sink.free() };
                return Err(step_err("rdma_create_id", e));
            }
        };
        let raw = id.as_ptr();
        {
            let mut g = l.inner.lock();
            g.id = Some(id);
            g.sink = Some(sink);
        }
        // Not under the lock: `rdma_listen` on a wildcard address may destroy
        // per-device ids, waiting for their handlers, which take the lock.
        let (netp, addrp) = (net.as_ptr(), addr.as_char_ptr());
        // SAFETY: The id is live: while `starting` is set a device removal leaves
        // it to us, and `stop` cannot be called yet (no one else has the listener
        // but its own event handler, which does not stop it).
        let ret = unsafe { ffi::cmecho_cm_listen(raw, netp, addrp, port, 128) };
        let removed = {
            let mut g = l.inner.lock();
            g.starting = false;
            g.removed
        };
        if let Err(e) = to_step("rdma_listen", ret) {
            l.stop();
            return Err(e);
        }
        if removed {
            // Its device went away meanwhile: done listening, as if it came after.
            l.stop();
            l.handler.removed();
        }
        Ok(l)
    }

    /// Whether the listener still has its id (a device removal takes it).
    pub(crate) fn is_listening(&self) -> bool {
        self.inner.lock().id.is_some()
    }

    /// Stops listening: destroys the id (waiting for a running handler) and the sink.
    ///
    /// From any callback of this layer (this listener's own [`ListenHandler`]
    /// callbacks, where `rdma_destroy_id` would wait for itself, or another id's
    /// CM event or a completion, which that wait could hold up), the destruction
    /// is deferred to the module's workqueue; no request is accepted meanwhile,
    /// and a `stop` from elsewhere returns before the deferred destruction is
    /// done.
    pub(crate) fn stop(&self) {
        let (id, sink, deferred) = {
            let mut g = self.inner.lock();
            let me = current_task();
            (
                g.id.take(),
                g.sink.take(),
                g.handler_tasks.contains(&me) || in_callback(),
            )
        };
        if deferred && (id.is_some() || sink.is_some()) {
            if let Err((id, sink)) = Self::release_later(id, sink) {
                // Cannot defer: put them back for a later `stop` from elsewhere.
                let mut g = self.inner.lock();
                g.id = id;
                g.sink = sink;
                drop(g);
                pr_warn!("cannot schedule a listener stop\n");
            }
            return;
        }
        Self::release(id, sink);
    }

    /// [`Listener::release`] on the module's workqueue; hands the parts back when
    /// that cannot be scheduled.
    #[allow(clippy::type_complexity)]
    fn release_later(
        id: Option<IdPtr>,
        sink: Option<SinkPtr>,
    ) -> Result<(), (Option<IdPtr>, Option<SinkPtr>)> {
        // The parts stay reachable from here until the work item is queued.
        let Ok(slot) = Arc::pin_init(new_mutex!(None, "cmecho_listener_stop"), GFP_KERNEL) else {
            return Err((id, sink));
        };
        *slot.lock() = Some((id, sink));
        let work = slot.clone();
        let queued = super::spawn(move || {
            if let Some((id, sink)) = work.lock().take() {
                Self::release(id, sink);
            }
        });
        match queued {
            Ok(()) => Ok(()),
            Err(_) => Err(slot.lock().take().unwrap_or((None, None))),
        }
    }

    /// Destroys the id (waiting for a running handler), then frees its sink.
    fn release(id: Option<IdPtr>, sink: Option<SinkPtr>) {
        if let Some(id) = id {
            id.destroy();
        }
        if let Some(sink) = sink {
            // SAFETY: The id that used the sink is destroyed.
            unsafe { sink.free() };
        }
    }

    /// Handles a connect request on the new id `child`; on error the caller rejects.
    fn accept(&self, child: *mut ffi::RdmaCmId, ev: &Event) -> Result<(), Verdict> {
        if self.inner.lock().id.is_none() {
            // Stopped, with the destruction of the id deferred: accept nothing.
            // SAFETY: `child` is the live new id of this CONNECT_REQUEST.
            let _ = unsafe { ffi::cmecho_cm_reject(child, ffi::CMECHO_REJ_CONSUMER) };
            return Err(Verdict::DestroyId);
        }
        let req = ConnectRequest {
            remote_ece: ev.ece,
            initiator_depth: ev.initiator_depth,
            responder_resources: ev.responder_resources,
        };
        let (h, ece) = match self.handler.connect_request(&req) {
            Ok(x) => x,
            Err(reason) => {
                let code = match reason {
                    RejectReason::Consumer => ffi::CMECHO_REJ_CONSUMER,
                    RejectReason::VendorOptionNotSupported => ffi::CMECHO_REJ_VENDOR_OPTION,
                };
                // SAFETY: `child` is the live new id of this CONNECT_REQUEST.
                let _ = unsafe { ffi::cmecho_cm_reject(child, code) };
                return Err(Verdict::DestroyId);
            }
        };
        let mut params = self.params;
        params.ece = ece;
        // Never more outstanding READs in either direction than the peer allows.
        params.initiator_depth = params.initiator_depth.min(req.responder_resources);
        params.responder_resources = params.responder_resources.min(req.initiator_depth);
        let conn = match Conn::new(h, params) {
            Ok(c) => c,
            Err(e) => {
                self.handler.accept_failed(step_err("alloc", e));
                return Err(Verdict::DestroyId);
            }
        };
        {
            let mut g = conn.inner.lock();
            g.remote_ece = ev.ece;
            // The request carried the route; nothing resolves it again.
            g.route_final = true;
            // `setup` and `accepted` run in the child's CM handler: a
            // `close_and_wait` from them must fail, not wait for itself.
            g.handler_task = current_task();
            // And a `close` from `setup` must leave the id to this path, which
            // the CM then destroys: `close_now` defers while this is set.
            g.connecting = true;
        }
        let r = self.accept_steps(&conn, child);
        // Decide and take in one critical section: once `connecting` is clear, a
        // close takes the id itself (and waits for this handler to destroy it).
        let taken = {
            let mut rg = conn.res.lock();
            let mut g = conn.inner.lock();
            g.connecting = false;
            let r = match r {
                Ok(()) if g.state == ConnState::Closing => Err(step_err("setup", ECONNABORTED)),
                r => r,
            };
            match r {
                Ok(()) => Ok(()),
                Err(e) => {
                    g.state = ConnState::Closed;
                    g.handler_task = 0;
                    Err((e, g.id.take(), rg.take(), g.sink.take(), g.me.take()))
                }
            }
        };
        conn.changed.notify_all();
        match taken {
            Ok(()) => {
                self.handler.accepted(conn.clone());
                conn.inner.lock().handler_task = 0;
                Ok(())
            }
            Err((e, id, res, sink, me)) => {
                // The CM destroys the child when we return non-zero: release the rest.
                drop(me);
                if let Some(res) = res {
                    // SAFETY: The child id is live until this handler returns; this
                    // is a CM handler, not a completion.
                    unsafe { res.destroy() };
                }
                if let Some(id) = id {
                    id.hand_back();
                }
                if let Some(sink) = sink {
                    // SAFETY: The child's context was reset to null below before the
                    // CM could deliver another event; nothing else uses the box.
                    unsafe {
                        ffi::cmecho_cm_set_context(child, core::ptr::null_mut());
                        sink.free();
                    }
                }
                self.handler.accept_failed(e);
                Err(Verdict::DestroyId)
            }
        }
    }

    fn accept_steps(
        &self,
        conn: &Arc<Conn<L::Conn>>,
        child: *mut ffi::RdmaCmId,
    ) -> Result<(), StepError> {
        let sink = SinkPtr::new(conn.clone()).map_err(|e| step_err("alloc", e))?;
        // SAFETY: `child` is the live new id of this CONNECT_REQUEST; its events go to
        // the new sink from now on.
        unsafe { ffi::cmecho_cm_set_context(child, sink.as_ctx()) };
        {
            let mut g = conn.inner.lock();
            // INVARIANT: The new id belongs to this connection from now on.
            g.id = Some(IdPtr(NonNull::new(child).ok_or(step_err("id", EINVAL))?));
            g.sink = Some(sink);
        }
        // The guarantee on the passive side: the child gets its parameters now,
        // before its QP exists and before the accept.
        conn.with_id(|id| id.apply_early(&conn.params))?;
        conn.create_res(&self.handler.qp_config())
            .map_err(|e| step_err("rdma_create_qp", e))?;
        conn.handler.setup(conn).map_err(|e| step_err("setup", e))?;
        let p = &conn.params;
        let ece = p.ece.unwrap_or_default();
        // SAFETY: `child` is live, and we run in its CONNECT_REQUEST handler, holding
        // the handler mutex `rdma_accept()` requires.
        let ret = unsafe {
            ffi::cmecho_cm_accept(
                child,
                p.responder_resources,
                p.initiator_depth,
                p.rnr_retry_count.get(),
                ece.vendor_id,
                ece.attr_mod,
            )
        };
        to_step("rdma_accept", ret)
    }
}

impl<L: ListenHandler> CmEvents for Listener<L> {
    fn cm_event(&self, id: *mut ffi::RdmaCmId, ev: &Event) -> Verdict {
        let me = current_task();
        let slot = {
            let mut g = self.inner.lock();
            let slot = g.handler_tasks.iter().position(|&t| t == 0);
            if let Some(i) = slot {
                g.handler_tasks[i] = me;
            }
            slot
        };
        let verdict = self.listener_event(id, ev);
        if let Some(i) = slot {
            self.inner.lock().handler_tasks[i] = 0;
        }
        verdict
    }
}

impl<L: ListenHandler> Listener<L> {
    fn listener_event(&self, id: *mut ffi::RdmaCmId, ev: &Event) -> Verdict {
        match ev.kind {
            EventKind::ConnectRequest => match self.accept(id, ev) {
                Ok(()) => Verdict::Keep,
                Err(v) => v,
            },
            EventKind::DeviceRemoval => {
                let (id, sink) = {
                    let mut g = self.inner.lock();
                    if g.starting {
                        // `listen` is using the id: it stops the listener.
                        g.removed = true;
                        return Verdict::Keep;
                    }
                    (g.id.take(), g.sink.take())
                };
                match id {
                    Some(id) => {
                        id.hand_back();
                        // Not freed here: the trampoline frees the box once the
                        // CM has the id.
                        let _freed_by_trampoline = sink;
                        self.handler.removed();
                        Verdict::DestroyId
                    }
                    // `stop` is destroying the id and waits for us.
                    None => Verdict::Keep,
                }
            }
            _ => Verdict::Keep,
        }
    }
}

#[pinned_drop]
impl<L: ListenHandler> PinnedDrop for Listener<L> {
    fn drop(self: Pin<&mut Self>) {
        self.stop();
    }
}
