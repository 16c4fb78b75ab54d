// SPDX-License-Identifier: GPL-2.0

//! The active side's setup: [`Conn::connect`], its steps and their retries.
//!
//! The id is lent to the connecting task from `ConnectStart` to `ConnectEnd`
//! (see `state.rs`): a close or a device removal meanwhile leaves the id to
//! it, and it releases the connection when it is done.

use super::state::{Action, Input, Side, State};
use super::{cm_conn_param, cm_ece, Conn, ConnHandler, ConnectStep, RESOLVE_SLACK_MS};
use crate::rdma::context::{current_task, in_callback};
use crate::rdma::error::{step_err, to_step, StepError};
use crate::rdma::ffi;
use crate::rdma::id::{IdPtr, SinkPtr};
use crate::rdma::netns::NetNs;
use crate::rdma::trace;
use crate::rdma::verbs::QpConfig;
use core::ptr;
use kernel::ffi::{c_int, c_ulong};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::time::{Instant, Monotonic};

/// The step [`Conn::connect`] runs, and since when (its hook excluded): the
/// step's duration goes to its tracepoint as the next starts, or as the
/// connect ends.
struct StepClock(Option<(ConnectStep, Instant<Monotonic>)>);

/// The right to connect an active-side connection, once: what
/// [`Conn::new_active`] returns.
///
/// An accepted connection has none, and [`Connector::connect`] consumes it, so
/// connecting an accepted connection, or connecting twice, does not compile.
/// [`Connector::conn`] is the connection itself, to keep (a clone of the `Arc`),
/// to close from elsewhere while it connects, or to use after.
///
/// # Invariants
///
/// The connection was made by [`Conn::new_active`], and no [`Conn::connect`]
/// has started on it.
pub(crate) struct Connector<H: ConnHandler>(pub(super) Arc<Conn<H>>);

impl<H: ConnHandler> Connector<H> {
    /// The connection to be connected.
    pub(crate) fn conn(&self) -> &Arc<Conn<H>> {
        &self.0
    }

    /// Connects to `addr`:`port` from namespace `net`, blocking until
    /// established: [`Conn::connect`], whose documentation says what it does,
    /// what a failure leaves and where it may be called.
    pub(crate) fn connect(
        self,
        net: &NetNs,
        addr: &CStr,
        port: u16,
        qp: QpConfig,
    ) -> Result<(), StepError> {
        self.0.connect(net, addr, port, qp)
    }
}

impl<H: ConnHandler> Conn<H> {
    /// Connects to `addr`:`port` from namespace `net`, blocking until established.
    ///
    /// Applies the parameters at their required moments (see the module
    /// documentation), creates the QP with `qp` between route resolution and
    /// connect, and calls `handler.setup()` before connecting. On failure the
    /// connection is closed. [`Conn::close`] from another thread aborts it. Once
    /// `ESTABLISHED` came it succeeds, even when the connection failed or closed
    /// before this task woke up: its handler (`ended`, completions) says why. Must be
    /// called from process context (it sleeps): `EDEADLK` from a callback of this
    /// layer (a CM event or a completion) or a [`Conn::with_res`] closure.
    ///
    /// Reached only through [`Connector::connect`], so only a connection made
    /// by [`Conn::new_active`] connects, and once; the state table refuses
    /// anything else all the same (`EINVAL` on the passive side,
    /// `ECONNABORTED` for a second start).
    pub(super) fn connect(
        self: &Arc<Self>,
        net: &NetNs,
        addr: &CStr,
        port: u16,
        qp: QpConfig,
    ) -> Result<(), StepError> {
        {
            let mut g = self.inner.lock();
            if g.phase.side == Side::Active && in_callback() {
                // It waits for CM events, which this callback may be holding up.
                return Err(step_err("rdma_connect", EDEADLK));
            }
            // An accepted connection (its id and QP are the listener's doing),
            // or a second call: refused. Else the id is lent to this task.
            if let Action::Refuse(e) = self.feed(&mut g, Input::ConnectStart) {
                return Err(step_err("rdma_connect", e));
            }
            g.connect_task = current_task();
        }
        let mut clock = StepClock(None);
        let r = self.connect_steps(net, addr, port, &qp, &mut clock);
        self.step_ended(
            &mut clock,
            r.as_ref().map_or_else(|e| e.err.to_errno(), |()| 0),
        );
        let (action, established) = {
            let mut g = self.inner.lock();
            g.connect_task = 0;
            let action = self.feed(&mut g, Input::ConnectEnd(r.is_ok()));
            (action, g.phase.was_established())
        };
        match (r, action) {
            (Err(e), _) => {
                self.close_now();
                Err(e)
            }
            (Ok(()), Action::Release) => {
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
            (Ok(()), _) => Ok(()),
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
        // The id stays live after the lock is released: while it is lent to us,
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
        clock: &mut StepClock,
    ) -> Result<(), StepError> {
        self.step(clock, ConnectStep::CreateId)?;
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
            if g.phase.state != State::Connecting {
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

        self.step(clock, ConnectStep::ResolveAddr)?;
        // Both resolutions take an `unsigned long`, which holds every `u32`.
        let timeout = self.params.resolve_timeout_ms as c_ulong;
        self.resolve("rdma_resolve_addr", State::AddrResolved, |id| {
            match net.sockaddr(addr, port) {
                // SAFETY: `connect_call` passes a live id (see there); the address
                // is valid storage the CM only reads; no source address.
                Ok(sa) => unsafe {
                    ffi::rdma_resolve_addr(id, ptr::null_mut(), sa.as_ptr(), timeout)
                },
                Err(e) => e.to_errno(),
            }
        })?;

        self.step(clock, ConnectStep::ResolveRoute)?;
        self.resolve("rdma_resolve_route", State::RouteResolved, |id| {
            // SAFETY: As above.
            unsafe { ffi::rdma_resolve_route(id, timeout) }
        })?;

        self.step(clock, ConnectStep::CreateQp)?;
        self.create_res(qp)
            .map_err(|e| step_err("rdma_create_qp", e))?;
        self.handler.setup(self).map_err(|e| step_err("setup", e))?;

        self.step(clock, ConnectStep::Connect)?;
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
        self.wait_for(State::Established, "rdma_connect", p.connect_timeout_ms)
    }

    /// Starts `step` of [`Conn::connect`]: ends the step before it, runs the
    /// handler's [`ConnHandler::before_step`] hook (on its task and with no
    /// lock held), and starts the step's clock.
    fn step(&self, clock: &mut StepClock, step: ConnectStep) -> Result<(), StepError> {
        self.step_ended(clock, 0);
        if let Err(e) = self.handler.before_step(self, step) {
            // The step failed before it started: its event, with no time.
            self.trace_step(step, 0, e.to_errno());
            return Err(step_err(step.name(), e));
        }
        clock.0 = Some((step, Instant::now()));
        Ok(())
    }

    /// Ends the step `clock` runs, if one runs, with `err` (0 or a negative
    /// errno): its `cmecho_cm_step` event.
    fn step_ended(&self, clock: &mut StepClock, err: c_int) {
        if let Some((step, t0)) = clock.0.take() {
            self.trace_step(step, crate::rdma::micros(t0.elapsed()), err);
        }
    }

    /// The `cmecho_cm_step` event of `step`.
    fn trace_step(&self, step: ConnectStep, us: u64, err: c_int) {
        trace::cm_step(
            self.handler.endpoint_name(),
            self.serial,
            step.c_name(),
            us,
            err,
        );
    }

    /// Runs one resolution step (`call`, then the wait for `want`) during
    /// [`Conn::connect`], and again, up to `resolve_retries` more times, when the
    /// CM reports that an attempt timed out: the CM has then put the id back where
    /// it was before the step, so the same call may be repeated.
    fn resolve(
        &self,
        step: &'static str,
        want: State,
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
        self.feed(&mut g, Input::Retry) == Action::Retry
    }
}
