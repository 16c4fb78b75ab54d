// SPDX-License-Identifier: GPL-2.0

//! Ownership of CM ids and of what their `context` points to, and the one C
//! entry point through which the CM delivers their events.
//!
//! Every id of this layer is created with a [`SinkPtr`] as its context: a boxed
//! `Arc` of the connection or listener that receives its events. The CM calls
//! `cmecho_rs_cm_event` (through `rust/helpers/cm.c`) with that context; the
//! receiver answers with a [`Verdict`] saying whether the CM destroys the id when
//! the handler returns. Whoever owns an [`IdPtr`] destroys it outside its
//! handler, or hands it back to the CM from inside one, and frees the sink only
//! once no id uses it. A handler can ask the CM to destroy an id only with the
//! proof [`IdPtr::hand_back`] gives for the id of the event it handles
//! ([`HandedBack`]): an id still owned elsewhere is never destroyed twice.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::context::Scope;
use super::error::{to_step, StepError};
use super::event::{Event, EventKind};
use super::ffi;
use super::netns::NetNs;
use super::params::{AckTimeout, ConnParams};
use core::cell::Cell;
use core::ptr::{self, NonNull};
use kernel::bindings;
use kernel::error::{from_err_ptr, to_result};
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::Arc;

/// Checks that the RDMA CM works from this module.
///
/// Creates an RC CM id in the initial network namespace, sets its ack timeout to
/// `ack_timeout` and destroys it. Needs no RDMA device.
pub(crate) fn probe_cm(ack_timeout: AckTimeout) -> Result {
    // SAFETY: `init_net` lives as long as the kernel. The id has no context: it is
    // never bound, resolved or connected, so no event can come, and
    // `cmecho_rs_cm_event` would ignore one. Creating it may sleep; module init
    // runs in process context.
    let id = from_err_ptr(unsafe {
        ffi::cmecho_cm_create_id(
            (&raw mut bindings::init_net).cast::<ffi::Net>(),
            ptr::null_mut(),
            PORT_SPACE,
            ffi::IB_QPT_RC,
        )
    })?;
    // INVARIANT: `rdma_create_id()` succeeded: the id is live and ours.
    let id = IdPtr(NonNull::new(id).ok_or(ENOMEM)?);
    // SAFETY: The id is live.
    let r = to_result(unsafe { ffi::rdma_set_ack_timeout(id.as_ptr(), ack_timeout.exponent()) });
    id.destroy();
    r
}

/// What an event handler asks of the CM once it returns.
pub(super) enum Verdict {
    /// Keep the id.
    Keep,
    /// The handler gave the event's id up: the CM destroys it after the handler
    /// returns, and [`cmecho_rs_cm_event`] frees the sink that came with it.
    DestroyId(HandedBack),
}

/// Proof that the id of the event being handled was handed back to the CM.
///
/// # Invariants
///
/// Made only by [`IdPtr::hand_back`], from the owned id of the event whose
/// handler runs (consumed: no [`IdPtr`] of it is left). `sink`, when there is
/// one, is the box that id's context points to, owned by nothing else.
pub(super) struct HandedBack {
    sink: Option<SinkPtr>,
}

/// The CM id an event is delivered for, while its handler runs.
///
/// # Invariants
///
/// `id` is a live id whose event handler is running. Only `cmecho_rs_cm_event`
/// makes one, and lends it to the handler by reference, so it does not outlive
/// the handler. `unowned` is true only for the new id of a `CONNECT_REQUEST`
/// (as the CM's event says, not as a handler may claim) that no value has taken
/// yet. `listener_ctx` is, for a `CONNECT_REQUEST`, the context the CM gave the
/// new id: the listener's sink, which the listener's id still uses; null for
/// other events.
pub(super) struct EventId {
    id: NonNull<ffi::RdmaCmId>,
    unowned: Cell<bool>,
    listener_ctx: *mut c_void,
}

impl EventId {
    /// The new id of a `CONNECT_REQUEST`, owned by nothing: returned once, as the
    /// value that owns it from now on; `None` afterwards and for any other event.
    pub(super) fn take_new(&self) -> Option<IdPtr> {
        // INVARIANT: Once taken, it is no longer unowned. The `IdPtr`'s: the
        // new id is live while its handler runs, and after that until someone
        // destroys it (the CM, once handed back, or the `IdPtr`'s owner).
        self.unowned.replace(false).then_some(IdPtr(self.id))
    }
}

/// The receiver of a CM id's events; what the id's context points to, boxed.
pub(super) trait CmEvents: Send + Sync {
    /// Handles one event of `id`, in the CM's handler context (handler mutex held).
    fn cm_event(&self, id: &EventId, ev: &Event) -> Verdict;
}

/// The boxed receiver an id's `context` points to.
pub(super) type Sink = Arc<dyn CmEvents>;

/// A pointer to a [`Sink`] made by [`KBox::into_raw`].
///
/// # Invariants
///
/// `self.0` came from `KBox::<Sink>::into_raw` and is freed at most once.
pub(super) struct SinkPtr(NonNull<Sink>);

// SAFETY: The box holds an `Arc<dyn CmEvents>`, which is `Send + Sync`.
unsafe impl Send for SinkPtr {}

impl SinkPtr {
    pub(super) fn new(sink: Sink) -> Result<Self> {
        let b = KBox::new(sink, GFP_KERNEL)?;
        // INVARIANT: The pointer comes from `KBox::into_raw`.
        Ok(Self(NonNull::new(KBox::into_raw(b)).ok_or(ENOMEM)?))
    }

    pub(super) fn as_ctx(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    /// Frees the box.
    ///
    /// # Safety
    ///
    /// No CM id may use the box as its context any more.
    pub(super) unsafe fn free(self) {
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

/// The port space of every id: TCP's, the one whose connections are RC with
/// private data in the CM's REQ and REP, as rping's and rdma-core's are.
const PORT_SPACE: ffi::rdma_ucm_port_space = ffi::RDMA_PS_TCP;

// SAFETY: A CM id may be used and destroyed from any thread.
unsafe impl Send for IdPtr {}

impl IdPtr {
    /// Creates an RC id whose events go to `sink`.
    pub(super) fn create(net: &NetNs, sink: &SinkPtr) -> Result<Self> {
        // SAFETY: `net` holds a reference on the namespace; the sink stays valid until
        // the id is destroyed (its owner frees it only after that).
        let id = from_err_ptr(unsafe {
            ffi::cmecho_cm_create_id(net.as_ptr(), sink.as_ctx(), PORT_SPACE, ffi::IB_QPT_RC)
        })?;
        // INVARIANT: `rdma_create_id()` succeeded: the id is live and ours.
        Ok(Self(NonNull::new(id).ok_or(ENOMEM)?))
    }

    pub(super) fn as_ptr(&self) -> *mut ffi::RdmaCmId {
        self.0.as_ptr()
    }

    /// Destroys the id; waits for a running handler of it to return.
    ///
    /// Must not be called from the id's own event handler.
    pub(super) fn destroy(self) {
        // SAFETY: By the type invariant the id is live; consuming `self` makes this
        // the only destruction. The callers never run in this id's handler.
        unsafe { ffi::rdma_destroy_id(self.as_ptr()) };
    }

    /// Gives the id to the CM, which destroys it when the running handler
    /// returns `Verdict::DestroyId` with the proof, and the id's `sink` with it
    /// (when its owner has it), which is freed then.
    ///
    /// Only the id of the event `ev` whose handler runs can be handed back, with
    /// the sink its context points to: anything else comes back unchanged.
    pub(super) fn hand_back(
        self,
        ev: &EventId,
        sink: Option<SinkPtr>,
    ) -> Result<HandedBack, (Self, Option<SinkPtr>)> {
        if self.0 != ev.id {
            return Err((self, sink));
        }
        // SAFETY: By the type invariant the id is live. It is the id of `ev`,
        // whose handler runs: its context is written only by that handler, or
        // before the CM had the id.
        let ctx = unsafe { (*self.as_ptr()).context };
        // The new id of a connect request starts with the listener's context:
        // that box is the listener's, whatever the new id points to.
        if sink
            .as_ref()
            .is_some_and(|s| s.as_ctx() != ctx || s.as_ctx() == ev.listener_ctx)
        {
            return Err((self, sink));
        }
        // INVARIANT: The id is the event's, consumed here; the sink is its
        // context, consumed too.
        Ok(HandedBack { sink })
    }

    /// Applies the parameters that must precede route resolution and connect or accept.
    pub(super) fn apply_early(&self, p: &ConnParams) -> Result<(), StepError> {
        if let Some(t) = p.ack_timeout {
            // SAFETY: The id is live by the type invariant.
            to_step("set_ack_timeout", unsafe {
                ffi::rdma_set_ack_timeout(self.as_ptr(), t.exponent())
            })?;
        }
        if let Some(t) = p.min_rnr_timer {
            // SAFETY: The id is live by the type invariant.
            to_step("set_min_rnr_timer", unsafe {
                ffi::rdma_set_min_rnr_timer(self.as_ptr(), t.code())
            })?;
        }
        if let Some(tos) = p.tos {
            // SAFETY: The id is live by the type invariant.
            unsafe { ffi::rdma_set_service_type(self.as_ptr(), c_int::from(tos)) };
        }
        Ok(())
    }
}

/// The verdict that hands `id`, with its `sink`, back to the CM: `DestroyId`
/// for the id of event `ev`. Anything else is a bug of the caller: it is then
/// left alone (`Keep`) and both are leaked, rather than destroyed twice or freed
/// while in use.
pub(super) fn give_back(id: IdPtr, ev: &EventId, sink: Option<SinkPtr>) -> Verdict {
    match id.hand_back(ev, sink) {
        Ok(h) => Verdict::DestroyId(h),
        Err(_leaked) => {
            pr_err!("cannot hand back a CM id other than its event's; leaked\n");
            Verdict::Keep
        }
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
    let Some(id) = NonNull::new(id) else {
        return 0;
    };
    // INVARIANT: `id` is live by the caller's guarantee, and its handler runs
    // until this returns; the handler only borrows it. The CM passes the new id
    // with a `CONNECT_REQUEST`, which it created for this event and nothing owns.
    let request = event.kind == EventKind::ConnectRequest;
    let eid = EventId {
        id,
        unowned: Cell::new(request),
        listener_ctx: if request { ctx } else { ptr::null_mut() },
    };
    match sink.cm_event(&eid, &event) {
        Verdict::Keep => 0,
        Verdict::DestroyId(h) => {
            if let Some(s) = h.sink {
                // SAFETY: By `HandedBack`'s invariant the box is the context of
                // this event's id, live, and owned by nothing else. The CM
                // destroys the id when we return, holding its handler mutex
                // meanwhile: no event of it uses the box after this; its
                // context is cleared first all the same.
                unsafe {
                    (*id.as_ptr()).context = ptr::null_mut();
                    s.free();
                }
            }
            1
        }
    }
}

/// The C side's type of [`cmecho_rs_cm_event`].
type CmEventFn =
    unsafe extern "C" fn(*mut c_void, *mut ffi::RdmaCmId, *mut ffi::RdmaCmEvent) -> c_int;

// The definition above and the header's prototype (as bindgen declares it) both
// have this type, or the build fails: the C caller and Rust agree.
const _: [CmEventFn; 2] = [cmecho_rs_cm_event, ffi::cmecho_rs_cm_event];
