// SPDX-License-Identifier: GPL-2.0

//! Work completions: how a CQ's completions reach the connection that posted
//! the work requests.
//!
//! Each QP's CQ (`rust/helpers/verbs.c`) calls [`complete`] with the context
//! its [`ResPtr`] was created with, once per completion, on the CQ's
//! workqueue; [`complete`] hands it to the context's [`Completion`] with the
//! tag the request was posted with. Only this module makes the [`FromCq`] proof
//! that [`Completion::complete`] requires, so no other code can call it.
//!
//! [`ResPtr`]: super::verbs::ResPtr
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::ffi;
use core::fmt;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

/// A failed work completion: the `ib_wc_status` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WcError(pub(crate) i32);

impl WcError {
    /// `IB_WC_WR_FLUSH_ERR`: the QP was flushed (a teardown, not a fault).
    pub(crate) fn is_flush(self) -> bool {
        // SAFETY: Pure function of an integer.
        unsafe { ffi::cmecho_wc_is_flush(self.0) }
    }
}

impl kernel::fmt::Display for WcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: `ib_wc_status_msg` returns a static string for any value.
        let msg = unsafe { CStr::from_char_ptr(ffi::cmecho_wc_status_str(self.0)) };
        write!(f, "{} ({})", msg.to_str().unwrap_or("?"), self.0)
    }
}

/// Proof that a call comes from a CQ's completion callback: only this module
/// makes one, so nothing else can call [`Completion::complete`].
pub(crate) struct FromCq(());

/// The receiver of a QP's work completions: what the completion context points to.
pub(crate) trait Completion: Send + Sync + 'static {
    /// A work completion: the tag it was posted with, and the bytes it carried or
    /// why it failed. Runs on the CQ's workqueue, one completion of a CQ at a time.
    fn complete(&self, from: FromCq, tag: u32, status: Result<u32, WcError>);
}

/// The CQ callback of a [`ResPtr<C>`]: hands each completion to its `C`.
///
/// # Safety
///
/// `ctx` must be the context of a live `ResPtr<C>`: a reference on an `Arc<C>`.
pub(super) unsafe extern "C" fn complete<C: Completion>(
    ctx: *mut c_void,
    tag: u32,
    status: c_int,
    byte_len: u32,
) {
    // SAFETY: The caller guarantees that `ctx` is the `C` the resources hold a
    // reference on; `cmecho_res_destroy` waits for this callback before that
    // reference is dropped.
    let c = unsafe { &*ctx.cast_const().cast::<C>() };
    let st = if status == 0 {
        Ok(byte_len)
    } else {
        Err(WcError(status))
    };
    c.complete(FromCq(()), tag, st);
}
