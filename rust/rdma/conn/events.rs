// SPDX-License-Identifier: GPL-2.0

//! What the CM and the CQ tell a connection: its id's events and its work
//! completions, fed to the state machine (`state.rs`), then passed on to the
//! ULP's [`ConnHandler`].

use super::state::{Action, Input};
use super::{Conn, ConnHandler};
use crate::rdma::context::{current_task, Scope};
use crate::rdma::cq::{Completion, FromCq, WcError};
use crate::rdma::event::{Event, EventKind};
use crate::rdma::ffi;
use crate::rdma::id::{CmEvents, EventId, Verdict};
use crate::rdma::params::Ece;
use core::sync::atomic::Ordering;

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
