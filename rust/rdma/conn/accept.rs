// SPDX-License-Identifier: GPL-2.0

//! The passive side's setup: from the listener's connect request, in the
//! request's handler ([`Conn::accept`]), to the accept's work item
//! ([`Conn::accept_later`]), which creates the QP, runs `setup` and
//! `rdma_accept` off the CM's worker.
//!
//! The id is lent to the request's handler and then to the work item until
//! `AcceptEnd` (see `state.rs`).

use super::state::{Action, Input, State};
use super::{cm_conn_param, cm_ece, Conn, ConnHandler, ACCEPT_WORK};
use crate::rdma::context::{current_task, Scope};
use crate::rdma::error::{step_err, to_step, StepError};
use crate::rdma::ffi;
use crate::rdma::id::{give_back, EventId, IdPtr, SinkPtr, Verdict};
use crate::rdma::params::PrivateData;
use crate::rdma::trace;
use crate::rdma::verbs::QpConfig;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::time::{Instant, Monotonic};

impl<H: ConnHandler> Conn<H> {
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
    pub(in crate::rdma) unsafe fn accept(
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
            unsafe { (*raw).context = sink.as_ctx() };
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
            g.handler_task = 0;
            g.accept_qp = None;
            if !matches!(self.feed(&mut g, Input::GiveBack), Action::HandBack(_)) {
                // Not lent: not this request's to give back.
                return Verdict::Keep;
            }
            (g.id.take(), rg.take(), g.sink.take(), g.me.take())
        };
        // The caller holds its own reference: this never drops `self`.
        drop(me);
        if let Some(res) = res {
            // SAFETY: The id is handed back only below; this is a CM handler,
            // not a completion.
            unsafe { self.release_res(res) };
        }
        // While lent, nothing but the accept takes the id.
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
    pub(in crate::rdma) fn accept_later(self: &Arc<Self>, ev: &EventId) -> Result<(), Verdict> {
        // The request's handler is no longer this connection's; cleared before
        // the work item can run and set its own task.
        self.inner.lock().handler_task = 0;
        match crate::rdma::workqueue::enqueue::<_, ACCEPT_WORK>(self.clone()) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.give_back_request(ev)),
        }
    }

    /// The deferred half of an accept, on the module's workqueue. With the
    /// id's handler mutex held (as `rdma_accept` requires; the CM's handlers of
    /// the id wait meanwhile), creates the QP, runs `setup` and `rdma_accept`,
    /// unless the connection was closed, failed or lost its device since the
    /// request. Then `AcceptEnd` decides in one critical section, taking the
    /// id back from the lend, whether it stays: it is released here when a
    /// step failed, when it is closing or its device was removed, or when it
    /// failed or was disconnected before `ESTABLISHED` (while the id is lent
    /// nothing else closes it).
    pub(super) fn accept_deferred(self: Arc<Self>) {
        let me = current_task();
        let (raw, qp) = {
            let mut g = self.inner.lock();
            g.connect_task = me;
            (g.id.as_ref().map(|id| id.as_ptr()), g.accept_qp.take())
        };
        let r = match (raw, qp) {
            (Some(raw), Some(qp)) => {
                // SAFETY: `raw` is this connection's live id: while it is lent
                // only this work item destroys it (`close_now` and
                // `DEVICE_REMOVAL` leave it), which it does only after unlocking.
                unsafe { ffi::rdma_lock_handler(raw) };
                let go = {
                    let mut g = self.inner.lock();
                    g.handler_task = me;
                    g.phase.state == State::Connecting
                };
                let r = if go {
                    // A callback of this layer: what would wait for this id's
                    // handlers (or for this accept) from `setup` fails.
                    let _scope = Scope::enter(0);
                    let t0 = Instant::<Monotonic>::now();
                    // SAFETY: `raw` is live (above), and this task holds its
                    // handler mutex.
                    let r = unsafe { self.accept_steps(raw, &qp) };
                    trace::cm_step(
                        self.handler.endpoint_name(),
                        self.serial,
                        c"rdma_accept",
                        crate::rdma::micros(t0.elapsed()),
                        r.as_ref().map_or_else(|e| e.err.to_errno(), |()| 0),
                    );
                    r
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
            g.connect_task = 0;
            self.feed(&mut g, Input::AcceptEnd(r.is_ok())) == Action::Release
        };
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
}
