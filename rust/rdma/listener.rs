// SPDX-License-Identifier: GPL-2.0

//! The passive side: a listening CM id that accepts connect requests with
//! the parameters it was given, applying them to each new id in time.
//!
//! A [`Listener`] holds `inner` (`cmecho_listener_inner`), level 5 of the
//! [lock order](super::conn#lock-order), never nested with a connection's
//! locks. It calls `rdma_listen` and `rdma_destroy_id` with it released: both
//! may wait for handlers of the listener's ids, which take it.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::conn::{Conn, ConnHandler};
use super::context::{current_task, in_callback};
use super::error::{step_err, to_step, StepError};
use super::event::{Event, EventKind};
use super::ffi;
use super::id::{give_back, CmEvents, EventId, IdPtr, SinkPtr, Verdict};
use super::netns::NetNs;
use super::params::{ConnParams, Ece, PrivateData};
use super::verbs::QpConfig;
use core::ptr;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

/// A connect request, as the passive side's [`ListenHandler`] sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectRequest {
    /// The ECE the peer offered (zero when none).
    pub(crate) remote_ece: Ece,
    /// The peer's initiator depth.
    pub(crate) initiator_depth: u8,
    /// The peer's responder resources.
    pub(crate) responder_resources: u8,
    /// The private data of the request, as the peer sent it: untrusted. Over
    /// the IB CM always [`PrivateData::MAX`] bytes, zero-padded after what the
    /// peer put there.
    pub(crate) private_data: PrivateData,
}

/// Why a connect request is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// `IB_CM_REJ_CONSUMER_DEFINED`: the ULP says no (e.g. too many connections).
    Consumer,
    /// `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`: the ECE offered is not acceptable.
    VendorOptionNotSupported,
}

/// A rejection: why, and the private data that goes with it to the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reject {
    /// The reason the CM sends.
    pub(crate) reason: RejectReason,
    /// What the peer reads in its `REJECTED` event (the ULP's format).
    pub(crate) private_data: PrivateData,
}

impl From<RejectReason> for Reject {
    /// A rejection without private data.
    fn from(reason: RejectReason) -> Self {
        Self {
            reason,
            private_data: PrivateData::EMPTY,
        }
    }
}

/// The ULP side of a listener.
pub(crate) trait ListenHandler: Send + Sync + 'static {
    /// The handler type of accepted connections.
    type Conn: ConnHandler;

    /// The QP each accepted connection gets.
    fn qp_config(&self) -> QpConfig;

    /// Decides on a connect request: a connection handler to accept, with the
    /// ECE to answer, or a rejection.
    fn connect_request(
        &self,
        req: &ConnectRequest,
    ) -> Result<(impl PinInit<Self::Conn, Error>, Option<Ece>), Reject>;

    /// A connect request was taken on: `conn` is the ULP's to close from now
    /// on. Called in the request's handler, before the QP exists and before
    /// the accept, which run off the CM's worker next: the connection then
    /// becomes established, or fails (its handler's
    /// [`ConnHandler::accept_failed`] says why), or its peer goes away before
    /// `ESTABLISHED`, and it closes itself. A ULP's deadline for reaching
    /// `ESTABLISHED` starts here.
    fn accepted(&self, conn: Arc<Conn<Self::Conn>>);

    /// Taking on a request failed at `err.step`, in the request's handler:
    /// before the ULP had the connection, or right after
    /// [`ListenHandler::accepted`] when the rest of the accept cannot be
    /// queued (the module unloading; the connection is then closed).
    fn accept_failed(&self, err: StepError);

    /// The listener's device was removed; the listener no longer listens.
    fn removed(&self);
}

/// State of a listener protected by [`Listener::inner`].
struct ListenInner {
    id: Option<IdPtr>,
    sink: Option<SinkPtr>,
    /// Where [`Listener::listen`] is.
    start: Start,
    /// The tasks running this listener's CM event handler (as addresses,
    /// compared only with `current`; 0 is a free slot). A wildcard listener's
    /// per-device ids deliver connect requests concurrently, one task each.
    handler_tasks: [usize; LISTEN_HANDLER_SLOTS],
}

/// Where [`Listener::listen`] is, and so who may take a listener's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// `listen` is calling `rdma_bind_addr` and `rdma_listen` on the id,
    /// without the lock: a device removal meanwhile leaves the id to it.
    Starting,
    /// A device removal came while `Starting`: `listen` stops the listener
    /// when its calls return.
    RemovedWhileStarting,
    /// `listen` returned: a device removal or [`Listener::stop`] takes the id.
    Started,
}

/// Connect requests the CM queues for a listener before it rejects more
/// (`rdma_listen`'s backlog). A ULP that limits its connections does so in its
/// [`ListenHandler::connect_request`].
const LISTEN_BACKLOG: c_int = 128;

/// Concurrent event handlers of one listener whose tasks are recorded: more run
/// only with more RDMA devices than this under one wildcard listener.
const LISTEN_HANDLER_SLOTS: usize = 8;

/// A listening CM id that accepts connections with the given parameters.
///
/// It listens until [`Listener::stop`] or a device removal: the id's context
/// holds a reference on it until then, so its owner must stop it. Accepted
/// connections are unaffected.
///
/// # Invariants
///
/// - `inner.id` and `inner.sink` are set together, by [`Listener::listen`], and
///   taken together, by [`Listener::stop`] or a device removal; the sink is the
///   box the id's context points to, freed only once the id is destroyed or
///   handed back with it.
/// - Until `inner.start` is `Started`, only [`Listener::listen`] uses the id:
///   a device removal meanwhile leaves it and records itself in
///   `inner.start`.
/// - No lock of the listener is held across `rdma_listen` or
///   `rdma_destroy_id`.
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
                        start: Start::Starting,
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
        // Parse, bind, listen: a failure of any is the listen step's.
        let ret = match net.sockaddr(addr, port) {
            Err(e) => e.to_errno(),
            Ok(sa) => {
                // SAFETY: The id is live: while `Starting` a device removal
                // leaves it to us, and `stop` cannot be called yet (no one else has
                // the listener but its own event handler, which does not stop it).
                // The address is valid storage the CM only reads.
                let r = unsafe { ffi::rdma_bind_addr(raw, sa.as_ptr().cast_mut()) };
                if r != 0 {
                    r
                } else {
                    // SAFETY: As above.
                    unsafe { ffi::rdma_listen(raw, LISTEN_BACKLOG) }
                }
            }
        };
        let removed = {
            let mut g = l.inner.lock();
            let was = g.start;
            g.start = Start::Started;
            was == Start::RemovedWhileStarting
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
            // Taken out first: no lock of ours is held across the destroy.
            let parts = work.lock().take();
            if let Some((id, sink)) = parts {
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

    /// Handles a connect request on its new id `id`: accepts it, or rejects it
    /// and has the CM destroy it. Anything but a connect request's new id, not
    /// yet taken, is left alone.
    fn accept(&self, id: &EventId, ev: &Event) -> Result<(), Verdict> {
        let Some(child) = id.take_new() else {
            return Err(Verdict::Keep);
        };
        if self.inner.lock().id.is_none() {
            // Stopped, with the destruction of the id deferred: accept nothing.
            // SAFETY: `child` is the live new id of this CONNECT_REQUEST (`EventId`);
            // no private data (null, length 0).
            let _ = unsafe {
                ffi::rdma_reject(
                    child.as_ptr(),
                    ptr::null(),
                    0,
                    ffi::IB_CM_REJ_CONSUMER_DEFINED,
                )
            };
            return Err(give_back(child, id, None));
        }
        let req = ConnectRequest {
            remote_ece: ev.ece,
            initiator_depth: ev.initiator_depth,
            responder_resources: ev.responder_resources,
            private_data: ev.private_data,
        };
        let (h, ece) = match self.handler.connect_request(&req) {
            Ok(x) => x,
            Err(rej) => {
                let code = match rej.reason {
                    RejectReason::Consumer => ffi::IB_CM_REJ_CONSUMER_DEFINED,
                    RejectReason::VendorOptionNotSupported => {
                        ffi::IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED
                    }
                };
                let data = rej.private_data.as_bytes();
                // SAFETY: `child` is the live new id of this CONNECT_REQUEST
                // (`EventId`); `data` is valid for its length (at most
                // `PrivateData::MAX`, so it fits the `u8`), and the CM copies it
                // into the reject before returning.
                let _ = unsafe {
                    ffi::rdma_reject(child.as_ptr(), data.as_ptr().cast(), data.len() as u8, code)
                };
                return Err(give_back(child, id, None));
            }
        };
        let mut params = self.params;
        params.ece = ece;
        // Never more outstanding READs in either direction than the peer allows.
        params.initiator_depth = params.initiator_depth.min(req.responder_resources);
        params.responder_resources = params.responder_resources.min(req.initiator_depth);
        let conn = match Conn::new_passive(h, params, ev.ece) {
            Ok(c) => c,
            Err(e) => {
                self.handler.accept_failed(step_err("alloc", e));
                return Err(give_back(child, id, None));
            }
        };
        // SAFETY: `child` is the new id of this CONNECT_REQUEST (`take_new`),
        // whose handler runs this; `conn` is a new passive connection.
        if let Err((e, verdict)) = unsafe { conn.accept(id, child, self.handler.qp_config()) } {
            self.handler.accept_failed(e);
            return Err(verdict);
        }
        // The ULP has it from admission on (its deadline, its count): the
        // rest of the accept runs off the CM's worker.
        self.handler.accepted(conn.clone());
        conn.accept_later(id).inspect_err(|_| {
            self.handler.accept_failed(step_err("rdma_accept", ENODEV));
        })
    }
}

impl<L: ListenHandler> CmEvents for Listener<L> {
    fn cm_event(&self, id: &EventId, ev: &Event) -> Verdict {
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
    fn listener_event(&self, eid: &EventId, ev: &Event) -> Verdict {
        match ev.kind {
            EventKind::ConnectRequest => match self.accept(eid, ev) {
                Ok(()) => Verdict::Keep,
                Err(v) => v,
            },
            EventKind::DeviceRemoval => {
                let (id, sink) = {
                    let mut g = self.inner.lock();
                    if g.start != Start::Started {
                        // `listen` is using the id: it stops the listener.
                        g.start = Start::RemovedWhileStarting;
                        return Verdict::Keep;
                    }
                    (g.id.take(), g.sink.take())
                };
                match id {
                    Some(id) => match id.hand_back(eid, sink) {
                        Ok(h) => {
                            // The sink goes with the id: the entry point frees
                            // it once the CM has the id.
                            self.handler.removed();
                            Verdict::DestroyId(h)
                        }
                        Err((id, sink)) => {
                            // Not this listener's id: it keeps its own.
                            let mut g = self.inner.lock();
                            g.id = Some(id);
                            g.sink = sink;
                            Verdict::Keep
                        }
                    },
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
