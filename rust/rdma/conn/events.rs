// SPDX-License-Identifier: GPL-2.0

//! What the CM and the CQ tell a connection: its id's events and its work
//! completions, fed to the state machine (`state.rs`), then passed on to the
//! ULP's [`ConnHandler`].

use super::state::{Action, Input};
use super::{Conn, ConnHandler, Fast, FastDone, DEFER_WORK};
use crate::rdma::context::{current_task, Scope};
use crate::rdma::cq::{Completion, FromCq, WcError};
use crate::rdma::event::{Event, EventKind};
use crate::rdma::ffi;
use crate::rdma::id::{CmEvents, EventId, Verdict};
use crate::rdma::params::{Ece, PollContext};
use crate::rdma::verbs::{BhOff, ResRef};
use core::sync::atomic::Ordering;
use kernel::sync::{Arc, ArcBorrow};
use kernel::workqueue::Work;

impl<H: ConnHandler> Conn<H> {
    /// A work request of this accepted connection completed before
    /// `ESTABLISHED`: the peer's QP talks to ours, so the connection is
    /// established whether or not the peer's RTU arrived (it may be lost, or
    /// late behind a burst of other connections' messages). Tells the CM so,
    /// once (`rdma_notify` with `IB_EVENT_COMM_EST`, what a provider's QP
    /// event would have a ULP do; rxe raises none): it then delivers
    /// `ESTABLISHED` as if the RTU had come, and a server's deadline for the
    /// RTU does not close a connection that already carries data.
    fn comm_est(&self) {
        let mut g = self.inner.lock();
        if self.feed(&mut g, Input::Completed) != Action::CommEst {
            return;
        }
        let Some(id) = &g.id else {
            return;
        };
        // SAFETY: The id is live while the lock is held and `g.id` is `Some`.
        // The call takes only the CM's spinlocks and queues the event; it
        // fails harmlessly where the CM state is not waiting for the RTU.
        let _ = unsafe { ffi::rdma_notify(id.as_ptr(), ffi::IB_EVENT_COMM_EST) };
    }
}

impl<H: ConnHandler> CmEvents for Conn<H> {
    fn cm_event(&self, id: &EventId, ev: &Event) -> Verdict {
        self.inner.lock().handler_task = current_task();
        let verdict = if ev.kind == EventKind::DeviceRemoval {
            self.device_removed(id, ev)
        } else {
            let action = {
                let mut g = self.inner.lock();
                match ev.kind {
                    EventKind::Established if g.remote_ece == Ece::default() => {
                        g.remote_ece = ev.ece;
                    }
                    EventKind::Rejected => g.reject_data = ev.private_data,
                    _ => {}
                }
                self.feed(&mut g, Input::Event(ev.kind, ev.status))
            };
            match action {
                Action::Established => self.handler.established(self),
                Action::Ended(reason) => self.handler.ended(self, reason),
                // Never established, and no `connect` or accept waits for it
                // (an accepted connection whose peer went away before the
                // RTU, or rejected it): its QP and buffers go now instead of
                // when the listener's owner stops.
                Action::Close => self.close(),
                _ => {}
            }
            Verdict::Keep
        };
        self.inner.lock().handler_task = 0;
        verdict
    }
}

impl<H: ConnHandler> Conn<H> {
    /// A completion in process context: tells the CM of the first, then
    /// hands it to [`ConnHandler::completion`].
    fn complete_now(&self, tag: u32, status: Result<u32, WcError>) {
        if status.is_ok() && !self.comm_est_done.load(Ordering::Relaxed) {
            self.comm_est();
        }
        let _scope = Scope::enter(0);
        self.cq_task.store(current_task(), Ordering::Relaxed);
        self.handler.completion(self, tag, status);
        self.cq_task.store(0, Ordering::Relaxed);
    }

    /// A completion of a softirq CQ: to the handler's fast path if it is a
    /// success, nothing waits before it, the CM needs no word of it
    /// (`comm_est`), and no other thread holds the resources; otherwise, and
    /// whenever the fast path declines, to process context.
    fn complete_fast(
        this: ArcBorrow<'_, Self>,
        res: ResRef<'_, Self>,
        tag: u32,
        status: Result<u32, WcError>,
    ) {
        if let Ok(len) = status {
            let clear =
                this.comm_est_done.load(Ordering::Relaxed) && this.deferred.lock().pending == 0;
            if clear {
                // Bottom halves off: on a busy poller's work item the fast
                // path then runs as it does in softirq, not preempted while
                // it holds the resources, which process context may be
                // waiting for.
                let _bh = BhOff::new();
                if let Some(held) = res.try_hold() {
                    let fast = Fast {
                        res: &held,
                        serial: this.serial,
                    };
                    if this.handler.fast_completion(&fast, tag, len) == FastDone::Done {
                        return;
                    }
                }
            }
        }
        this.deferred.lock().push((tag, status));
        // Queued already (then it runs again for this one) or running (it
        // looks at the ring again before it ends): either way it comes. Not
        // queued only without a workqueue, which goes after every CQ.
        let _ =
            crate::rdma::workqueue::enqueue_completion::<_, DEFER_WORK>(Arc::<Self>::from(this));
    }

    /// The deferred half of [`Conn::complete_fast`]: hands every completion
    /// queued to [`Conn::complete_now`], oldest first.
    pub(super) fn run_deferred(&self) {
        loop {
            let Some((tag, status)) = self.deferred.lock().pop() else {
                return;
            };
            self.complete_now(tag, status);
            let mut d = self.deferred.lock();
            d.pending = d.pending.saturating_sub(1);
        }
    }

    /// Waits until no deferred completion is queued or running: called once
    /// the CQ is freed, so that none comes after the resources go. Not from
    /// a completion (it would wait for itself).
    pub(super) fn flush_deferred(&self) {
        // SAFETY: The work item is initialised and lives in `self`; flushing
        // waits for it without touching what it points to.
        unsafe {
            kernel::bindings::flush_work(Work::<Self, DEFER_WORK>::raw_get(&self.defer_work));
        }
    }
}

impl<H: ConnHandler> Completion for Conn<H> {
    fn complete(
        this: ArcBorrow<'_, Self>,
        _from: FromCq,
        res: ResRef<'_, Self>,
        tag: u32,
        status: Result<u32, WcError>,
    ) {
        if this.params.poll_context == PollContext::Softirq {
            Self::complete_fast(this, res, tag, status);
        } else {
            this.complete_now(tag, status);
        }
    }
}
