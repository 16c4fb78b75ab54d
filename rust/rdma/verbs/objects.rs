// SPDX-License-Identifier: GPL-2.0

//! The kernel objects under a connection's QP, each freed on drop: the PD,
//! the CQ and the fast-registration MRs.

use crate::rdma::ffi;
use core::ptr::NonNull;
use kernel::error::from_err_ptr;
use kernel::prelude::*;

/// Where a CQ's completions run: in a workqueue's process context, since the
/// handlers they reach take mutexes and may allocate.
const POLL_CTX: ffi::ib_poll_context = ffi::IB_POLL_WORKQUEUE;

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

/// A completion queue polled on a workqueue, each completion going to the
/// [`Cqe`] of its work request.
///
/// # Invariants
///
/// `self.0` is a live CQ, freed on drop.
pub(super) struct Cq(pub(super) NonNull<ffi::IbCq>);

impl Cq {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the CQ exists.
    pub(super) unsafe fn alloc(dev: NonNull<ffi::IbDevice>, nr_cqe: u32) -> Result<Self> {
        if i32::try_from(nr_cqe).is_err() {
            return Err(EINVAL);
        }
        // SAFETY: `dev` is live by the caller's guarantee.
        let p = from_err_ptr(unsafe { ffi::cmecho_cq_alloc(dev.as_ptr(), nr_cqe, POLL_CTX) })?;
        // INVARIANT: A CQ was allocated.
        Ok(Self(NonNull::new(p).ok_or(ENOMEM)?))
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: Live by the type invariant, and no QP uses it any more (see
        // `ResPtr::destroy`); `ib_free_cq` waits for its completion work.
        unsafe { ffi::ib_free_cq(self.0.as_ptr()) };
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
        // first (`ResPtr::destroy`). A failure leaves nothing to do.
        // A kernel MR has no user data (`ib_dereg_mr`, a static inline).
        let _ = unsafe { ffi::ib_dereg_mr_user(self.0.as_ptr(), core::ptr::null_mut()) };
    }
}
