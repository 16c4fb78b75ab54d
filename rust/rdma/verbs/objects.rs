// SPDX-License-Identifier: GPL-2.0

//! The kernel objects under a connection's QP, each freed on drop: the PD,
//! the CQ and the fast-registration MRs.

use crate::rdma::ffi;
use crate::rdma::params::PollContext;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use kernel::bindings;
use kernel::error::from_err_ptr;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::time::{Delta, Instant, Monotonic};
use kernel::types::Opaque;

/// Completions a busy-polled CQ's work item handles per poll.
const POLL_BATCH: c_int = 16;
/// Completions a busy-polled CQ's work item handles per run before it queues
/// itself again (as the core's `IB_POLL_WORKQUEUE` work does, so that other
/// work on its CPU gets a turn).
const POLL_BUDGET: u32 = 65536;

/// A protection domain.
///
/// # Invariants
///
/// `self.0` is a live PD, freed on drop.
pub(super) struct Pd(pub(super) NonNull<ffi::IbPd>);

impl Pd {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the PD exists.
    pub(super) unsafe fn alloc(dev: NonNull<ffi::IbDevice>) -> Result<Self> {
        // SAFETY: `dev` is live by the caller's guarantee.
        let p = from_err_ptr(unsafe { ffi::cmecho_pd_alloc(dev.as_ptr()) })?;
        // INVARIANT: A PD was allocated.
        Ok(Self(NonNull::new(p).ok_or(ENOMEM)?))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: Live by the type invariant; whatever used it (MRs, the QP) is
        // gone first, as the owners below order their fields. A kernel PD has no
        // user data (`ib_dealloc_pd`, a static inline, passes none either).
        let r = unsafe { ffi::ib_dealloc_pd_user(self.0.as_ptr(), core::ptr::null_mut()) };
        // The kernel's own wrapper warns too, once: a kernel PD's free does not
        // fail.
        static WARNED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
        if r != 0 && !WARNED.swap(true, core::sync::atomic::Ordering::Relaxed) {
            kernel::warn_on!(true);
        }
    }
}

/// A completion queue, each completion going to the [`Cqe`] of its work
/// request: polled by the core (`IB_POLL_WORKQUEUE`,
/// `IB_POLL_UNBOUND_WORKQUEUE` or `IB_POLL_SOFTIRQ`), or, busy polled, by
/// this layer's own work item ([`Poller`]).
///
/// # Invariants
///
/// `cq` is a live CQ, freed on drop. With a `poller`, the CQ was allocated
/// for direct polling with [`on_comp`] as its completion handler and the
/// poller as its context, and the poller's `cq` is it.
///
/// [`Cqe`]: crate::rdma::cq::Cqe
pub(super) struct Cq {
    cq: NonNull<ffi::IbCq>,
    poller: Option<Pin<KBox<Poller>>>,
}

/// What polls a busy-polled CQ: a work item on one of the module's two
/// polling workqueues, per CPU or unbound as the poll context picks
/// (`workqueue::poll_queue`), queued by the CQ's completion handler. Each run
/// polls until the CQ has been empty for `spin`, then arms the CQ and ends:
/// while completions follow each other within `spin` (a depth-1 echo's next
/// message), none waits for a work item to wake up.
///
/// # Invariants
///
/// `work` (the first field: `repr(C)`) is initialised with [`poll_work`];
/// `wq` is one of the module's polling workqueues, which outlive every CQ.
/// `cq` is the CQ this poller polls, set before the CQ is first armed; it is
/// live while `stopping` is false, and for the whole of a run of `work` that
/// saw it false (the `Cq`'s drop sets it, then disables the work item,
/// waiting for a run under way, before it frees the CQ).
#[repr(C)]
#[pin_data]
struct Poller {
    #[pin]
    work: Opaque<ffi::work_struct>,
    cq: AtomicPtr<ffi::IbCq>,
    wq: NonNull<bindings::workqueue_struct>,
    spin: Delta,
    stopping: AtomicBool,
}

impl Cq {
    /// A CQ of `nr_cqe` entries, whose completions run where `poll` says: on
    /// a work item in process context, per CPU or unbound, or in the CQ's
    /// softirq; with `busy_poll`, one this layer polls on a work item (per
    /// CPU for `Workqueue`, unbound otherwise) for that long after its last
    /// completion before it sleeps again.
    ///
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the CQ exists.
    pub(super) unsafe fn alloc(
        dev: NonNull<ffi::IbDevice>,
        nr_cqe: u32,
        poll: PollContext,
        busy_poll: Option<Delta>,
    ) -> Result<Self> {
        if i32::try_from(nr_cqe).is_err() {
            return Err(EINVAL);
        }
        let Some(spin) = busy_poll else {
            let ctx = match poll {
                PollContext::Workqueue => ffi::IB_POLL_WORKQUEUE,
                PollContext::UnboundWorkqueue => ffi::IB_POLL_UNBOUND_WORKQUEUE,
                PollContext::Softirq => ffi::IB_POLL_SOFTIRQ,
            };
            // SAFETY: `dev` is live by the caller's guarantee.
            let p = from_err_ptr(unsafe { ffi::cmecho_cq_alloc(dev.as_ptr(), nr_cqe, ctx) })?;
            // INVARIANT: A CQ was allocated, polled by the core.
            return Ok(Self {
                cq: NonNull::new(p).ok_or(ENOMEM)?,
                poller: None,
            });
        };
        let wq = crate::rdma::workqueue::poll_queue(poll).ok_or(ENODEV)?;
        let poller = KBox::pin_init(
            try_pin_init!(Poller {
                // SAFETY: `w` is the work item's place, pinned in the box.
                work <- Opaque::ffi_init(|w| unsafe { ffi::cmecho_work_init(w, Some(poll_work)) }),
                cq: AtomicPtr::new(core::ptr::null_mut()),
                wq,
                spin,
                stopping: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        let ctx: *const Poller = &*poller;
        // SAFETY: `dev` is live by the caller's guarantee. The context is the
        // poller, which the result keeps until after the CQ is freed; the
        // handler is `on_comp`, which takes it for a `Poller`.
        let p = from_err_ptr(unsafe {
            ffi::cmecho_cq_alloc_polled(dev.as_ptr(), nr_cqe, Some(on_comp), ctx.cast_mut().cast())
        })?;
        let cq = NonNull::new(p).ok_or(ENOMEM)?;
        poller.cq.store(p, Ordering::Release);
        // SAFETY: The CQ is live. No QP uses it yet, so nothing can have
        // come unseen: the return value says nothing here.
        let _ = unsafe { ffi::cmecho_cq_arm(p) };
        // INVARIANT: As allocated above; the poller's `cq` is set.
        Ok(Self {
            cq,
            poller: Some(poller),
        })
    }

    /// The CQ.
    pub(super) fn as_ptr(&self) -> *mut ffi::IbCq {
        self.cq.as_ptr()
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Some(p) = &self.poller {
            // A run under way ends at its next poll, and is waited for; the
            // work item, disabled, is queued no more, whatever a completion
            // handler still does.
            p.stopping.store(true, Ordering::Release);
            // SAFETY: The work item is initialised and lives in the poller.
            unsafe { ffi::disable_work_sync(p.work.get()) };
        }
        // SAFETY: Live by the type invariant, and no QP uses it any more (see
        // `ResOwner::destroy`); `ib_free_cq` waits for the core's completion
        // work, and a busy-polled CQ's work is disabled above. After it the
        // provider calls no completion handler of the CQ, and the poller may
        // go.
        unsafe { ffi::ib_free_cq(self.cq.as_ptr()) };
    }
}

/// The completion handler of a busy-polled CQ: queues its poller's work.
///
/// # Safety
///
/// `ctx` must be the [`Poller`] the CQ was allocated with, still live.
unsafe extern "C" fn on_comp(_cq: *mut ffi::IbCq, ctx: *mut c_void) {
    // SAFETY: By the caller's guarantee; the `Cq` that owns the poller frees
    // it only after the CQ, after which no handler of the CQ runs.
    let p = unsafe { &*ctx.cast_const().cast::<Poller>() };
    if !p.stopping.load(Ordering::Acquire) {
        p.queue();
    }
}

/// A run of a busy-polled CQ's work item.
///
/// # Safety
///
/// `work` must be the work item of a live [`Poller`].
unsafe extern "C" fn poll_work(work: *mut ffi::work_struct) {
    // SAFETY: The work item is the poller's first field (`repr(C)`), and the
    // poller is live by the caller's guarantee: its `Cq` disables the work,
    // and waits for a run, before freeing it.
    let p = unsafe { &*work.cast_const().cast::<Poller>() };
    p.run();
}

impl Poller {
    /// Queues the work item, unless it is queued already.
    fn queue(&self) {
        // SAFETY: The work item is initialised and lives in the poller; the
        // workqueue outlives every CQ (type invariant).
        unsafe { ffi::cmecho_queue_work(self.wq.as_ptr(), self.work.get()) };
    }

    /// Polls the CQ, handing each completion to its `Cqe`, until it has been
    /// empty for `spin` and is armed again with nothing unseen; or until the
    /// CQ is being freed; or, after [`POLL_BUDGET`] completions, queues
    /// itself again and ends. Whenever another task waits for the CPU, it
    /// yields to it first.
    fn run(&self) {
        let cq = self.cq.load(Ordering::Acquire);
        let mut done = 0u32;
        let mut empty_since: Option<Instant<Monotonic>> = None;
        loop {
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            // SAFETY: `stopping` is false, so the CQ is live for this run (type
            // invariant); every request on it carries a `Cqe`, whose `done`
            // gets the completion.
            let n = unsafe { ffi::ib_process_cq_direct(cq, POLL_BATCH) };
            if n > 0 {
                done = done.saturating_add(n.unsigned_abs());
                empty_since = None;
                if done >= POLL_BUDGET {
                    self.queue();
                    return;
                }
            } else if empty_since.get_or_insert_with(Instant::now).elapsed() >= self.spin {
                // SAFETY: Live, as above.
                if unsafe { ffi::cmecho_cq_arm(cq) } <= 0 {
                    return;
                }
                // Completions came before the CQ was armed: poll them.
                empty_since = None;
            } else {
                kernel::processor::cpu_relax();
            }
            // Another task waits for this CPU: as a rule the provider's,
            // which makes the next completion. It runs now, not at the next
            // tick, and the poll goes on after it.
            // SAFETY: Reads the calling task's flags; nothing else.
            if unsafe { ffi::cmecho_need_resched() } {
                // SAFETY: A work item runs in process context, with no lock
                // held; the task stays runnable, so this only yields.
                unsafe { bindings::schedule() };
            }
        }
    }
}

/// A fast-registration memory region.
///
/// # Invariants
///
/// `self.0` is a live MR, deregistered on drop.
pub(super) struct Mr(pub(super) NonNull<ffi::IbMr>);

impl Mr {
    pub(super) fn alloc(pd: &Pd, max_num_sg: u32) -> Result<Self> {
        // SAFETY: `pd` is live by its type invariant.
        let p = from_err_ptr(unsafe {
            ffi::ib_alloc_mr(pd.0.as_ptr(), ffi::IB_MR_TYPE_MEM_REG, max_num_sg)
        })?;
        // INVARIANT: An MR was allocated.
        Ok(Self(NonNull::new(p).ok_or(ENOMEM)?))
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: Live by the type invariant; the QP that used it is destroyed
        // first (`ResOwner::destroy`). A failure leaves nothing to do.
        // A kernel MR has no user data (`ib_dereg_mr`, a static inline).
        let _ = unsafe { ffi::ib_dereg_mr_user(self.0.as_ptr(), core::ptr::null_mut()) };
    }
}
