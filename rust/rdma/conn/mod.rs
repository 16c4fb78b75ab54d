// SPDX-License-Identifier: GPL-2.0

//! One RC connection: a CM id with its QP, CQ, PD and buffers, and its state.
//!
//! A [`Conn`] is made active ([`Conn::new_active`], then [`Connector::connect`]) or
//! passive (by a [`Listener`] inside a connect request), and is released by
//! [`Conn::close`] or [`Conn::close_and_wait`], by its ULP, whatever happened
//! to it before.
//!
//! # States
//!
//! A connection's phase is what it does, how far its setup got and who
//! holds its CM id (`state::Phase`); [`ConnState`] is what the ULP sees of
//! it. Every change of a phase goes through one pure function, whose table
//! is at the top of `state.rs` and is walked row by row by the KUnit suite
//! `cmecho_conn_state`. The code that feeds it its inputs is split by phase:
//!
//! - `connect.rs`: [`Conn::connect`], the active side's setup;
//! - `accept.rs`: the passive side's, from the listener's connect request to
//!   the accept's work item ([`Conn::accept_later`]);
//! - `events.rs`: the CM's events and the completions;
//! - `teardown.rs`: disconnect, close, the release, the device removal.
//!
//! Who destroys the id: while the id is lent (`connect` runs, or an accept
//! from its request to the end of its work item), only that task; while it
//! is held, the release (`close_now`, run by [`Conn::close`]'s work item,
//! [`Conn::close_and_wait`], or the lender when it ends) or, on
//! `DEVICE_REMOVAL`, the CM, to which the handler gives it back. After
//! `ESTABLISHED`, [`Connector::connect`] succeeds whatever follows.
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
//! 2. A CQ's completion work, the core's or, busy-polled
//!    ([`ConnParams::busy_poll_us`]), this layer's own, and, for a softirq
//!    CQ, the connection's work item for deferred completions:
//!    [`ConnHandler::completion`] runs in them, and releasing QP resources
//!    waits for them (`ib_free_cq`, `disable_work_sync`, then `flush_work`).
//!    A softirq CQ's [`ConnHandler::fast_completion`] runs in the CQ's
//!    softirq (busy-polled, on the poller's work item with bottom halves
//!    off), where it takes only interrupt-safe spinlocks.
//! 3. The ULP's own locks.
//! 4. [`Conn`]'s `res` (`cmecho_conn_res`): held while a [`Conn::with_res`]
//!    closure runs, and while the QP resources are created or taken out.
//! 5. [`Conn`]'s `inner` (`cmecho_conn_inner`) and [`Listener`]'s `inner`
//!    (`cmecho_listener_inner`): never nested with each other or with 1 to 4
//!    the other way. Below them only the CM's `qp_mutex`, taken by the
//!    parameter setters, `rdma_disconnect` and `rdma_create_qp`.
//! 6. [`Conn`]'s `deferred` (`cmecho_conn_deferred`, a spinlock with
//!    interrupts off): the ring of a softirq CQ's deferred completions, held
//!    only to push or pop one; nothing is taken under it.
//!
//! The QP resources themselves are held by one thread at a time, through
//! an atomic word rather than a lock (`verbs::ResPtr`): process context
//! holds them under `res` and waits for a completion that holds them; a
//! softirq completion only tries, and defers when it cannot.
//!
//! So no lock of 3 to 5 is held while calling a CM function that takes a
//! handler mutex, or while freeing a CQ: this layer calls `rdma_connect`,
//! `rdma_resolve_*`, `rdma_listen` and `rdma_destroy_id` and destroys QP
//! resources with its own locks released. The ULP's closures run under a lock
//! of this layer only in [`Conn::with_res`], under `cmecho_conn_res`; what
//! would take that lock again from the closure fails with `EDEADLK`. A `Conn`
//! waits on `changed` (`cmecho_conn_changed`) with only its `inner` held, and
//! its `res` too when [`Conn::disconnect_and_wait`] is called from a closure:
//! that wait is bounded, and the `DISCONNECTED` handler needs only `inner`.
//!
//! The calls that wait for CM handlers or completions ([`Connector::connect`],
//! [`Conn::close_and_wait`]) fail with `EDEADLK` from any callback of this
//! layer and any [`Conn::with_res`] closure, [`Conn::disconnect_and_wait`]
//! from any callback (its wait is bounded, so a closure outside a callback may
//! call it), and
//! [`Listener::stop`] defers its work from them: a callback waiting for
//! another's handler or completion, while that one waits for it, is a cycle no
//! lock order shows. `with_res` does not nest, so two `cmecho_conn_res` are
//! never held at once.

mod accept;
mod connect;
mod deferred;
mod events;
mod state;
mod state_kunit;
mod teardown;

use super::context::{current_task, in_with_res, Scope, WITH_RES};
use super::cq::WcError;
use super::error::{step_err, StepError};
use super::event::EventKind;
use super::ffi;
use super::id::{IdPtr, SinkPtr};
use super::params::{ConnParams, Ece, PollContext, PrivateData};
use super::trace;
use super::verbs::{self, QpAttrs, QpConfig};
pub(crate) use connect::Connector;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use deferred::Deferred;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, new_spinlock_irq, Arc, CondVar, Mutex, SpinLockIrq};
use kernel::time::{msecs_to_jiffies, Delta};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};
use state::{Action, Input, Phase, State};

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

    /// The fast path of a successful work completion, for a connection whose
    /// poll context is [`PollContext::Softirq`]: runs in the CQ's softirq
    /// (or, busy polled, on the poller's work item), so it must not sleep,
    /// allocate with `GFP_KERNEL` or take a lock that process context takes
    /// without disabling interrupts (a `SpinLockIrq` is fine, a `Mutex` is
    /// not). [`Fast`] is all of the connection it may use. It returns
    /// [`FastDone::Defer`] to have [`ConnHandler::completion`] handle this
    /// completion in process context instead, having done nothing of it.
    /// Failed completions, and every completion while one deferred before
    /// it waits, go to `completion` without it, in order. Optional: the
    /// default defers every completion.
    ///
    /// [`PollContext::Softirq`]: super::params::PollContext::Softirq
    fn fast_completion(&self, _fast: &Fast<'_, Self>, _tag: u32, _len: u32) -> FastDone {
        FastDone::Defer
    }

    /// The connection is established.
    fn established(&self, conn: &Conn<Self>);

    /// The connection ended after being established. Called at most once.
    fn ended(&self, conn: &Conn<Self>, reason: EndReason);

    /// [`Connector::connect`] is about to start `step`: called on the connecting task,
    /// in [`ConnectStep`] order, with no lock of this layer held, so it may sleep.
    /// An error fails the connect at that step. Optional: the default does
    /// nothing. A ULP that times the steps, or holds many connections at each
    /// step until all reach it (as rdma-core's `cmtime` does), hooks in here.
    /// While it runs, a close or a device removal of `conn` waits for it: a
    /// hook that waits must watch [`Conn::is_open`] and fail once it is false.
    fn before_step(&self, _conn: &Conn<Self>, _step: ConnectStep) -> Result {
        Ok(())
    }

    /// The private data [`Connector::connect`] sends with its connect request (the
    /// ULP's format; the peer's listener reads it in
    /// [`ConnectRequest::private_data`]). Optional: the default sends none.
    ///
    /// [`ConnectRequest::private_data`]: super::ConnectRequest::private_data
    fn connect_data(&self) -> PrivateData {
        PrivateData::EMPTY
    }

    /// The name of the endpoint this connection belongs to, as the layer's
    /// tracepoints show it (`endpoint=`; `rust/rdma/trace.rs`). Called with
    /// the connection's lock held (on each change of its state): it must only
    /// return the name, without calling into the connection or sleeping.
    /// Optional: the default is empty.
    fn endpoint_name(&self) -> &CStr {
        c""
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

/// What [`ConnHandler::fast_completion`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FastDone {
    /// It handled the completion.
    Done,
    /// It did nothing: [`ConnHandler::completion`] gets the completion, in
    /// process context.
    Defer,
}

/// What a connection's fast path ([`ConnHandler::fast_completion`]) may use:
/// its QP resources, held by it, for posting and copying ([`Post`]), the
/// connection's number, and nothing that sleeps.
pub(crate) struct Fast<'a, H: ConnHandler> {
    res: &'a verbs::ResPtr<Conn<H>>,
    serial: u32,
}

impl<H: ConnHandler> Fast<'_, H> {
    /// [`Conn::serial`].
    pub(crate) fn serial(&self) -> u32 {
        self.serial
    }
}

/// What the thread holding a connection's QP resources can do with them
/// without sleeping: post, and copy to or from its buffers. Both holders have
/// it: process context in [`Conn::with_res`] (a [`verbs::ResPtr`]) and a fast
/// path ([`Fast`]), so a ULP writes each step once for both.
pub(crate) trait Post {
    /// [`ResPtr::post_send`](verbs::ResPtr::post_send).
    fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result;

    /// [`ResPtr::post_recv`](verbs::ResPtr::post_recv).
    fn post_recv(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result;

    /// [`ResPtr::produce_buf`](verbs::ResPtr::produce_buf).
    fn produce_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &mut [u8])) -> Result;

    /// [`ResPtr::scan_buf`](verbs::ResPtr::scan_buf).
    fn scan_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &[u8]) -> bool) -> Result<bool>;
}

impl<C: super::cq::Completion> Post for verbs::ResPtr<C> {
    fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        verbs::ResPtr::post_send(self, tag, idx, off, len)
    }

    fn post_recv(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        verbs::ResPtr::post_recv(self, tag, idx, off, len)
    }

    fn produce_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &mut [u8])) -> Result {
        verbs::ResPtr::produce_buf(self, idx, len, f)
    }

    fn scan_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &[u8]) -> bool) -> Result<bool> {
        verbs::ResPtr::scan_buf(self, idx, len, f)
    }
}

impl<H: ConnHandler> Post for Fast<'_, H> {
    fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        self.res.post_send(tag, idx, off, len)
    }

    fn post_recv(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        self.res.post_recv(tag, idx, off, len)
    }

    fn produce_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &mut [u8])) -> Result {
        self.res.produce_buf(idx, len, f)
    }

    fn scan_buf(&self, idx: u32, len: u32, f: impl FnMut(usize, &[u8]) -> bool) -> Result<bool> {
        self.res.scan_buf(idx, len, f)
    }
}

/// The steps of [`Connector::connect`], in the order it runs them.
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
        // ASCII: valid UTF-8.
        self.c_name().to_str().unwrap_or("?")
    }

    /// The step's name as a C string (for a tracepoint).
    pub(crate) fn c_name(self) -> &'static CStr {
        match self {
            Self::CreateId => c"rdma_create_id",
            Self::ResolveAddr => c"rdma_resolve_addr",
            Self::ResolveRoute => c"rdma_resolve_route",
            Self::CreateQp => c"rdma_create_qp",
            Self::Connect => c"rdma_connect",
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
    /// What the connection does, how far it got, who holds the id. Changed
    /// only by [`Conn::feed`].
    phase: Phase,
    remote_ece: Ece,
    /// The task running this connection's CM event handler, or the accept's
    /// work item holding the id's handler mutex, if one runs (as an address,
    /// compared only with `current`).
    handler_task: usize,
    /// The task the id is lent to, once it runs ([`Conn::connect`] or the
    /// accept's work item; as an address, compared only with `current`):
    /// `setup` runs on it.
    connect_task: usize,
    /// The private data of the peer's reject, once `REJECTED` came.
    reject_data: PrivateData,
    /// The QP of an accepted connection, from [`Conn::accept`] in the request's
    /// handler until its work item creates it.
    accept_qp: Option<QpConfig>,
}

/// One RC connection: a CM id with its QP, CQ, PD and buffers.
///
/// Created by [`Conn::new_active`] (active side) or by a [`Listener`] (passive
/// side); released by [`Conn::close`].
///
/// # Invariants
///
/// - `inner.id` is the connection's own live CM id, when `Some`; `inner.sink`
///   is the box its context points to, freed only once the id is destroyed
///   or handed back with it. `inner.id` is `Some` only while the phase's
///   holder is `Lent` or `Held`.
/// - `res` is `Some` only while `inner.id` is: the QP resources are created on
///   the id and always taken out with it, in one critical section of both
///   locks, and destroyed before it.
/// - While the id is `Lent`, only the task it is lent to takes `inner.id`:
///   [`Conn::connect`]; for an accepted connection, the request's handler in
///   [`Conn::accept`], then the accept's work item.
/// - `inner.me` holds a reference from creation until a close takes it.
/// - Once the holder is `Releasing`, only that `close_now` releases, and
///   `Closed` is final.
/// - [`ConnHandler::ended`] is called only on the phase's one transition out
///   of "up" by an event (`Action::Ended`), so at most once.
/// - `comm_est_done` is `inner.phase.comm_est_done()`, stored by
///   [`Conn::feed`] with each phase.
#[pin_data]
pub(crate) struct Conn<H: ConnHandler> {
    /// The QP resources, under a lock of their own (taken before `inner`) so
    /// that a [`Conn::with_res`] closure may use the rest of the connection.
    #[pin]
    res: Mutex<Option<verbs::ResOwner<Conn<H>>>>,
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
    /// The completions a softirq CQ handed to process context, in order,
    /// and how many of them are not handled yet (`deferred.pending`).
    #[pin]
    deferred: SpinLockIrq<Deferred>,
    /// The work item that hands them to [`ConnHandler::completion`].
    #[pin]
    defer_work: Work<Conn<H>, DEFER_WORK>,
    /// A copy of `inner.phase.comm_est_done()`: nothing more to tell the CM
    /// on a successful completion. Read without the lock on every
    /// completion, so that the lock is taken only while it is false.
    comm_est_done: AtomicBool,
    /// The connection's number in its tracepoints' events: given at creation,
    /// counting from 1 for the module's lifetime (after 2^32 - 1, from 0
    /// again).
    serial: u32,
    params: ConnParams,
    #[pin]
    handler: H,
}

/// How much longer than the CM's own resolution timeout to wait for its event.
const RESOLVE_SLACK_MS: u32 = 1000;

/// The last number given to a [`Conn`] ([`Conn::serial`]).
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(0);

/// The id of [`Conn`]'s close work item.
const CLOSE_WORK: u64 = 0;
/// The id of [`Conn`]'s accept work item.
const ACCEPT_WORK: u64 = 1;
/// The id of [`Conn`]'s work item for deferred completions.
const DEFER_WORK: u64 = 2;

impl<H: ConnHandler> Conn<H> {
    fn new(handler: impl PinInit<H, Error>, params: ConnParams, phase: Phase) -> Result<Arc<Self>> {
        let conn = Arc::pin_init(
            try_pin_init!(Self {
                res <- new_mutex!(None, "cmecho_conn_res"),
                res_task: AtomicUsize::new(0),
                inner <- new_mutex!(ConnInner {
                    me: None,
                    id: None,
                    sink: None,
                    phase,
                    remote_ece: Ece::default(),
                    handler_task: 0,
                    connect_task: 0,
                    reject_data: PrivateData::EMPTY,
                    accept_qp: None,
                }, "cmecho_conn_inner"),
                changed <- new_condvar!("cmecho_conn_changed"),
                cq_task: AtomicUsize::new(0),
                close_work <- new_work!("cmecho_conn_close"),
                accept_work <- new_work!("cmecho_conn_accept"),
                deferred <- new_spinlock_irq!(Deferred::new(), "cmecho_conn_deferred"),
                defer_work <- new_work!("cmecho_conn_defer"),
                comm_est_done: AtomicBool::new(phase.comm_est_done()),
                serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed).wrapping_add(1),
                params,
                handler <- handler,
            }),
            GFP_KERNEL,
        )?;
        conn.inner.lock().me = Some(conn.clone());
        Ok(conn)
    }

    /// Creates an active-side connection, and the [`Connector`] that connects it.
    ///
    /// `params` are the connection's for good: nothing can change them later.
    pub(crate) fn new_active(
        handler: impl PinInit<H, Error>,
        params: ConnParams,
    ) -> Result<Connector<H>> {
        // INVARIANT: Just made, active, and not connecting.
        Ok(Connector(Self::new(handler, params, Phase::active())?))
    }

    /// Creates a passive-side connection for a connect request whose peer sent
    /// `remote_ece`; [`Conn::accept`] then accepts it.
    ///
    /// Its id is lent from the start, with the calling task as its handler
    /// task: the listener's `accepted` runs in the request's CM handler, and
    /// `setup` in the accept's work item holding the id's handler mutex, so a
    /// `close_and_wait` from them must fail rather than wait for itself, and a
    /// `close` meanwhile must leave the id to the accept.
    pub(super) fn new_passive(
        handler: impl PinInit<H, Error>,
        params: ConnParams,
        remote_ece: Ece,
    ) -> Result<Arc<Self>> {
        // The id is lent to the request's handler; the request carried the
        // route.
        let conn = Self::new(handler, params, Phase::passive())?;
        {
            let mut g = conn.inner.lock();
            g.remote_ece = remote_ece;
            g.handler_task = current_task();
        }
        Ok(conn)
    }

    /// Feeds `input` to the state machine, under `inner` (`g`): stores the
    /// phase that follows, wakes the waiters if it changed, and returns what
    /// to do, which the caller does after unlocking.
    fn feed(&self, g: &mut ConnInner<H>, input: Input) -> Action {
        let (next, action) = g.phase.next(input);
        if next != g.phase {
            if next.state != g.phase.state {
                trace::conn_state(
                    self.handler.endpoint_name(),
                    self.serial,
                    g.phase.state.name(),
                    next.state.name(),
                    input.name(),
                    input.status(),
                );
            }
            g.phase = next;
            self.comm_est_done
                .store(next.comm_est_done(), Ordering::Relaxed);
            self.changed.notify_all();
        }
        action
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
    fn wait_for(&self, want: State, step: &'static str, ms: u32) -> Result<(), StepError> {
        let mut g = self.inner.lock();
        let mut left = msecs_to_jiffies(ms);
        loop {
            let ph = g.phase;
            match ph.state {
                s if s == want => return Ok(()),
                // Established, then failed, disconnected or closed before this
                // task woke up: the connect succeeded; what came after is the
                // handler's to report (`ended`, its completions).
                _ if want == State::Established && ph.was_established() => return Ok(()),
                State::Failed(kind, status) => {
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
                State::DeviceRemoved => return Err(step_err("DEVICE_REMOVAL", ENODEV)),
                // A disconnect waits for the peer's answer; anything else
                // this side started ends the wait.
                State::Disconnecting if want == State::Disconnected => {}
                State::Closing | State::Closed | State::Disconnected | State::Disconnecting => {
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
        if self.params.poll_context == PollContext::Softirq {
            // Room for twice the completions the queues can hold: more than
            // a ULP that posts only as its completions free slots can have
            // waiting. Beyond it the connection fails (`Deferred::push`).
            let cap = (qp.max_send_wr as usize + qp.max_recv_wr as usize + 4) * 2;
            let mut ring = KVec::with_capacity(cap, GFP_KERNEL)?;
            for _ in 0..cap {
                ring.push((0, Ok(0)), GFP_KERNEL)?;
            }
            let old = {
                let mut d = self.deferred.lock();
                if d.len > 0 {
                    return Err(EBUSY);
                }
                d.head = 0;
                core::mem::replace(&mut d.ring, ring)
            };
            drop(old);
        }
        let mut rg = self.res.lock();
        let g = self.inner.lock();
        let id = g.id.as_ref().ok_or(ENOTCONN)?;
        let busy_poll = (self.params.busy_poll_us > 0)
            .then(|| Delta::from_micros(i64::from(self.params.busy_poll_us)));
        *rg = Some(verbs::ResOwner::create(
            id,
            self.clone(),
            qp,
            self.params.poll_context,
            busy_poll,
        )?);
        Ok(())
    }

    /// Runs `f` with the QP resources, or fails with `ENOTCONN` once they are gone.
    ///
    /// `f` runs under the resources' lock, which keeps them from being destroyed
    /// meanwhile, and may use the rest of the connection. What could wait for
    /// that lock, or for this connection's completions, from within `f` fails
    /// with `EDEADLK`: a nested `with_res` of any connection (or
    /// [`Conn::qp_attrs`]), [`Conn::close_and_wait`] and [`Connector::connect`];
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
        let res = g.as_ref().ok_or(ENOTCONN)?.hold();
        let _scope = Scope::enter(WITH_RES);
        self.res_task.store(me, Ordering::Relaxed);
        let r = f(&res);
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
        self.inner.lock().phase.peer_answered()
    }

    /// The connection's number in its tracepoints' events (`conn=`).
    pub(crate) fn serial(&self) -> u32 {
        self.serial
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> ConnState {
        self.inner.lock().phase.public()
    }

    /// Whether the connection is being set up or established: not ended,
    /// disconnecting, closing or closed. Work requests failing to post on a
    /// connection that is not open are a consequence of its teardown, not an
    /// error of their own.
    pub(crate) fn is_open(&self) -> bool {
        self.inner.lock().phase.is_open()
    }

    /// Whether a flushed work request fails the connection: it is established
    /// and this side has not disconnected. Its QP then went into error without
    /// a teardown, and the device may report only the flush (rxe flushes the
    /// very request that failed). Before `ESTABLISHED` the CM itself puts the
    /// QP into error (a reject, a failed accept) and its event, or the connect
    /// timeout, says why; after a disconnect or a close, flushes are the
    /// teardown's own.
    pub(crate) fn flush_is_failure(&self) -> bool {
        self.inner.lock().phase.state == State::Established
    }

    /// The ECE the peer sent (zero when it sent none).
    pub(crate) fn remote_ece(&self) -> Ece {
        self.inner.lock().remote_ece
    }

    /// What the QP really got, read back from the provider: a call that may
    /// sleep (`ib_query_qp`), so not one for a completion handler, which
    /// reads what it needs once, as the connection is established.
    pub(crate) fn qp_attrs(&self) -> Result<QpAttrs> {
        self.with_res(|res| res.query_qp())
    }

    /// The QP's number, without asking the provider; `None` once the QP is
    /// gone, or before it exists.
    pub(crate) fn qp_num(&self) -> Option<u32> {
        self.with_res(|res| Ok(res.qp_num())).ok()
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
        let id = g.id.as_ref().filter(|_| g.phase.route_final())?;
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
        let id = g.id.as_ref().filter(|_| g.phase.route_final())?;
        // SAFETY: As in `route_plt`.
        let tc = unsafe { ffi::cmecho_cm_route_tclass(id.as_ptr()) };
        u8::try_from(tc).ok()
    }
}

impl_has_work! {
    impl{H: ConnHandler} HasWork<Self, CLOSE_WORK> for Conn<H> { self.close_work }
    impl{H: ConnHandler} HasWork<Self, ACCEPT_WORK> for Conn<H> { self.accept_work }
    impl{H: ConnHandler} HasWork<Self, DEFER_WORK> for Conn<H> { self.defer_work }
}

impl<H: ConnHandler> WorkItem<CLOSE_WORK> for Conn<H> {
    type Pointer = Arc<Self>;

    /// The deferred half of [`Conn::close`], with the reference the close took
    /// out of `me`.
    fn run(this: Arc<Self>) {
        this.close_now();
    }
}

impl<H: ConnHandler> WorkItem<DEFER_WORK> for Conn<H> {
    type Pointer = Arc<Self>;

    /// Hands the deferred completions to the handler, in order.
    fn run(this: Arc<Self>) {
        this.run_deferred();
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
