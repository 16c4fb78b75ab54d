// SPDX-License-Identifier: GPL-2.0

//! The ends of a connection: [`Conn::disconnect`], [`Conn::close`] and its
//! release (`close_now`), [`Conn::close_and_wait`], and the device removal,
//! which may give the id back to the CM from its handler.

use super::state::{Action, Holder, Input, State, Then};
use super::{Conn, ConnHandler, CLOSE_WORK};
use crate::rdma::context::{current_task, in_callback, in_handler};
use crate::rdma::error::{step_err, StepError};
use crate::rdma::event::Event;
use crate::rdma::ffi;
use crate::rdma::id::{give_back, EventId, Verdict};
use crate::rdma::trace;
use crate::rdma::verbs::{DestroyTimes, ResOwner};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::time::{msecs_to_jiffies, Instant, Monotonic};

/// How long a release waits for the CM's `ESTABLISHED` of an accepted
/// connection it was told is established (`Action::AwaitEstablished`): the
/// CM's own work, which only a loaded CM worker delays.
const ESTABLISHED_WAIT_MS: u32 = 10_000;

impl<H: ConnHandler> Conn<H> {
    /// Starts a disconnect; the QP flushes and the peer sees `DISCONNECTED`.
    /// The connection is no longer [open](Conn::is_open). Before it is
    /// established, a disconnect gives the connection up: a
    /// [`Connector::connect`](super::Connector::connect) under way (or to
    /// come) fails with `ECONNABORTED`, an accept under way
    /// releases it, and no resolution is repeated.
    ///
    /// `rdma_disconnect` takes the CM's `qp_mutex`: not a call for a
    /// completion handler, which [`Conn::close`]s instead (the release
    /// disconnects).
    #[allow(
        dead_code,
        reason = "API for ULPs; cmecho.ko's handlers close, which disconnects"
    )]
    pub(crate) fn disconnect(&self) {
        let mut g = self.inner.lock();
        if self.feed(&mut g, Input::Disconnect) != Action::Disconnect {
            return;
        }
        if let Some(id) = &g.id {
            // SAFETY: The id is live while the lock is held and `g.id` is `Some`.
            // Its result only says whether the id was connected.
            let _ = unsafe { ffi::rdma_disconnect(id.as_ptr()) };
        }
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
        self.wait_for(State::Disconnected, "rdma_disconnect", ms)
    }

    /// Closes the connection from any context: disconnects, destroys the QP,
    /// frees the CQ and the buffers, destroys the id. The work runs on the module's
    /// workqueue, so this is safe in CM and completion handlers.
    pub(crate) fn close(&self) {
        let me = {
            let mut g = self.inner.lock();
            // Wakes a `connect` in progress, which then fails with
            // `ECONNABORTED`.
            if self.feed(&mut g, Input::Close) != Action::QueueRelease {
                return;
            }
            g.me.take()
        };
        if let Some(me) = me {
            // The work item is the connection's own: queuing allocates nothing.
            // It fails only with no workqueue (the module unloading, which
            // closes every connection with `close_and_wait` first) or queued
            // already (`me` is taken once): then that close does the work, and
            // `me` goes back for it.
            if let Err(me) = crate::rdma::workqueue::enqueue::<_, CLOSE_WORK>(me) {
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
    /// from this connection's own `setup` in
    /// [`Connector::connect`](super::Connector::connect).
    /// Closing waits for the CM handlers (`rdma_destroy_id`), for `connect` or
    /// the accept's work item, and for the CQ's completion work: from a callback,
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
                || (g.phase.holder == Holder::Lent && g.connect_task == me)
                || self.cq_task.load(Ordering::Relaxed) == me
                || self.res_task.load(Ordering::Relaxed) == me
            {
                return Err(EDEADLK);
            }
        }
        self.close_now();
        let mut g = self.inner.lock();
        while g.phase.state != State::Closed {
            // A concurrent close is finishing: wait for it. A pending signal
            // cannot cut this short (the close must finish), nor make it spin:
            // then the wait is uninterruptible, until the closer's wake-up.
            if let kernel::sync::CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(100))
            {
                if g.phase.state != State::Closed {
                    self.changed.wait(&mut g);
                }
            }
        }
        Ok(())
    }

    /// Releases everything this connection still owns, in the required order.
    pub(super) fn close_now(&self) {
        let mut input = Input::Release;
        let mut left = msecs_to_jiffies(ESTABLISHED_WAIT_MS);
        let (id, res, sink, me) = loop {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            match self.feed(&mut g, input) {
                Action::Release => break (g.id.take(), rg.take(), g.sink.take(), g.me.take()),
                Action::AwaitEstablished => {
                    // Completions may go on meanwhile: only `inner` is held,
                    // and the wait releases it.
                    drop(rg);
                    left = match self.changed.wait_interruptible_timeout(&mut g, left) {
                        kernel::sync::CondVarTimeoutResult::Woken { jiffies } => jiffies,
                        // Over, or a signal this wait cannot sleep through:
                        // release now, whatever the CM still sends.
                        _ => 0,
                    };
                    if left == 0 {
                        input = Input::ReleaseAnyway;
                    }
                }
                // Closed, or a release is under way, or the id is lent: then
                // the task it is lent to releases when it is done.
                _ => return,
            }
        };
        let us = |t: Instant<Monotonic>| crate::rdma::micros(t.elapsed());
        let t = Instant::<Monotonic>::now();
        if let Some(id) = &id {
            // SAFETY: We own the id (taken out of the shared state above).
            let _ = unsafe { ffi::rdma_disconnect(id.as_ptr()) };
        }
        let disconnect_us = us(t);
        let mut parts = DestroyTimes::default();
        if let Some(res) = res {
            // SAFETY: The id under the resources is destroyed only below; this is
            // no completion of theirs (`close_and_wait` refuses one, `close` defers).
            parts = unsafe { self.release_res(res) };
        }
        let t = Instant::<Monotonic>::now();
        if let Some(id) = id {
            id.destroy();
        }
        trace::release(
            self.handler.endpoint_name(),
            self.serial,
            disconnect_us,
            parts.destroy_qp_us,
            parts.free_us,
            us(t),
        );
        if let Some(sink) = sink {
            // SAFETY: The id that used the sink as its context is destroyed.
            unsafe { sink.free() };
        }
        let mut g = self.inner.lock();
        self.feed(&mut g, Input::Released);
        drop(g);
        // The callers hold their own reference: this never drops `self`.
        drop(me);
    }

    /// Destroys the QP resources taken out of `res`, then waits for the
    /// completions a softirq CQ deferred to process context: after it, no
    /// completion of theirs runs.
    ///
    /// # Safety
    ///
    /// As [`ResOwner::destroy`]: the id under them is live, and the caller
    /// is none of their completions (nor a deferred one: those run on the
    /// work item this waits for).
    pub(super) unsafe fn release_res(&self, res: ResOwner<Self>) -> DestroyTimes {
        // SAFETY: By the caller's guarantee.
        let t = unsafe { res.destroy() };
        self.flush_deferred();
        t
    }

    /// Handles `DEVICE_REMOVAL` (event `ev` of id `eid`): decides who
    /// destroys the id, and takes it, in one critical section.
    ///
    /// - Lent (`connect` or the accept's work item uses the id): that task
    ///   sees the state, fails, and destroys the QP and the id itself, which
    ///   the CM waits for ([`Verdict::Keep`]). If `ESTABLISHED` came,
    ///   `connect` succeeds, and the handler learns of the end here
    ///   ([`ConnHandler::ended`]).
    /// - Held: this path takes the id, the QP resources and the sink, releases
    ///   the resources and gives the id back to the CM ([`Verdict::DestroyId`]):
    ///   a close that comes later finds nothing to release.
    /// - Otherwise a release took the id already and is destroying it;
    ///   `rdma_destroy_id` waits for this handler ([`Verdict::Keep`]).
    pub(super) fn device_removed(&self, eid: &EventId, ev: &Event) -> Verdict {
        let (action, id, res, sink) = {
            let mut rg = self.res.lock();
            let mut g = self.inner.lock();
            let action = self.feed(&mut g, Input::Event(ev.kind, ev.status));
            match action {
                Action::HandBack(_) => (action, g.id.take(), rg.take(), g.sink.take()),
                _ => (action, None, None, None),
            }
        };
        let then = match action {
            Action::HandBack(then) => then,
            Action::Ended(reason) => Then::Ended(reason),
            _ => Then::Nothing,
        };
        if let Some(res) = res {
            // SAFETY: The id is handed back only below; a CM handler is not a
            // completion, so waiting for the CQ's work is allowed here.
            unsafe { self.release_res(res) };
        }
        // The sink goes with the id: the entry point frees it once the CM has
        // the id.
        let verdict = match id {
            Some(id) => give_back(id, eid, sink),
            None => Verdict::Keep,
        };
        match then {
            Then::Ended(reason) => self.handler.ended(self, reason),
            // Accepted, never established, and no `connect` waits for it: as
            // after a reject, nobody else would close it, and it would hold
            // its place until the listener's owner stops.
            Then::Close => self.close(),
            Then::Nothing => {}
        }
        verdict
    }
}
