// SPDX-License-Identifier: GPL-2.0

//! Work completions: how a CQ's completions reach the connection that posted
//! the work requests.
//!
//! Every work request a [`ResPtr`] posts carries one of its [`Cqe`]s, which
//! names the tag the request was posted with and the [`Completion`] context of
//! the resources. The CQ (polled on a workqueue or in its softirq) calls the
//! `Cqe`'s `done` function, [`wc_done`], once per completion; it hands the tag and the
//! outcome to the context. Only this module makes the [`FromCq`] proof that
//! [`Completion::complete`] requires, so no other code can call it.
//!
//! [`ResPtr`]: super::verbs::ResPtr
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::ffi;
use super::verbs::ResRef;
use core::fmt;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::ArcBorrow;

/// A failed work completion: the `ib_wc_status` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WcError(pub(crate) ffi::ib_wc_status);

impl WcError {
    /// `IB_WC_WR_FLUSH_ERR`: the QP was flushed (a teardown, not a fault).
    pub(crate) fn is_flush(self) -> bool {
        self.0 == ffi::IB_WC_WR_FLUSH_ERR
    }
}

impl kernel::fmt::Display for WcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A status no enum value has prints as the kernel prints one
        // (`ib_wc_status_msg` answers "unrecognized status" for it).
        // SAFETY: `ib_wc_status_msg` returns a static string for any value.
        let msg = unsafe { CStr::from_char_ptr(ffi::ib_wc_status_msg(self.0)) };
        write!(f, "{} ({})", msg.to_str().unwrap_or("?"), self.0)
    }
}

/// Proof that a call comes from a CQ's completion callback: only this module
/// makes one, so nothing else can call [`Completion::complete`].
pub(crate) struct FromCq(());

/// The receiver of a QP's work completions: what the completion context points to.
pub(crate) trait Completion: Send + Sync + Sized + 'static {
    /// A work completion: the tag it was posted with, and the bytes it carried or
    /// why it failed; `res` reaches the resources whose CQ runs it. Runs where
    /// the CQ's poll context says (a work item, or the CQ's softirq), one
    /// completion of a CQ at a time.
    fn complete(
        this: ArcBorrow<'_, Self>,
        from: FromCq,
        res: ResRef<'_, Self>,
        tag: u32,
        status: Result<u32, WcError>,
    );
}

/// What a work request carries to its completion: the kernel's `struct ib_cqe`
/// (whose address the request holds), followed by the tag and the context.
///
/// A `Cqe` made for writers ([`Cqe::new`] with `writer`) is carried only by
/// requests that make the device write a local buffer (receives, RDMA READs),
/// and counts them: [`Cqe::post_writer`] binds it to the buffer's count of
/// such requests in flight and increments both, and the completion decrements
/// both before the context sees it. That count is what tells
/// [`ResPtr`](super::verbs::ResPtr) the device is done with a buffer.
///
/// # Invariants
///
/// `cqe.done` is [`wc_done::<C>`] for the `C` that `ctx` points to, an
/// `Arc<C>`'s. The `Cqe` owns no reference on it: whoever made it keeps the
/// `C` alive as long as a request carrying it may complete ([`Cqe::new`]).
/// `res` is the address of the `ResPtr<C>` it belongs to, set
/// ([`Cqe::set_res`]) before any request carries it. A `Cqe` with
/// `signal_success` false reports failures only. A writer `Cqe` reaches work
/// requests only through [`Cqe::post_writer`]. `inflight` is at least the
/// number of requests posted with it that have not completed (always 0 unless
/// `writer`); while it is not 0, `writes` points to a live count that includes
/// them (until [`wc_done`] has decremented both).
#[repr(C)]
pub(super) struct Cqe {
    cqe: ffi::ib_cqe,
    ctx: *const c_void,
    res: *const c_void,
    tag: u32,
    signal_success: bool,
    writer: bool,
    inflight: AtomicU32,
    writes: AtomicPtr<AtomicU32>,
}

impl Cqe {
    /// A `Cqe` for `tag` whose completions go to `ctx`; with `signal_success`
    /// false only failed completions do; with `writer` it is for requests that
    /// write a local buffer, posted through [`Cqe::post_writer`] only.
    ///
    /// # Safety
    ///
    /// `ctx` must be the address of an `Arc<C>`'s `C`, and stay valid for as
    /// long as a work request carrying this `Cqe` may complete. With `writer`,
    /// the address of the `Cqe` must reach a work request only through
    /// [`Cqe::post_writer`], never [`Cqe::as_ptr`]. [`Cqe::set_res`] must be
    /// called before either.
    pub(super) unsafe fn new<C: Completion>(
        ctx: *const C,
        tag: u32,
        signal_success: bool,
        writer: bool,
    ) -> Self {
        // INVARIANT: `done` is `wc_done::<C>` and `ctx` a `C`; nothing in flight.
        Self {
            cqe: ffi::ib_cqe {
                done: Some(wc_done::<C>),
            },
            ctx: ctx.cast(),
            res: core::ptr::null(),
            tag,
            signal_success,
            writer,
            inflight: AtomicU32::new(0),
            writes: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Names `res`, the resources this `Cqe` belongs to, boxed where they
    /// stay until their CQ is freed: before any request carries it.
    pub(super) fn set_res(&mut self, res: *const c_void) {
        self.res = res;
    }

    /// The address a work request carries: that of the whole `Cqe`, whose first
    /// field is the `ib_cqe`, so that [`wc_done`] may read the rest. The device
    /// and the CQ only read it.
    pub(super) fn as_ptr(&self) -> *mut ffi::ib_cqe {
        core::ptr::from_ref(self).cast::<ffi::ib_cqe>().cast_mut()
    }

    /// Posts a request that writes the buffer whose count of such requests is
    /// `count`: `post` gets this `Cqe`'s address and returns what the post
    /// returned. `EBUSY` if requests of this `Cqe` still in flight write another
    /// buffer (its completions could not tell which count to decrement);
    /// `EINVAL` for a `Cqe` not made for writers.
    ///
    /// # Safety
    ///
    /// Only one thread at a time may post with this `Cqe`. `count` must stay
    /// valid until every request posted with it has completed. `post` must post
    /// exactly one work request carrying the address it gets when it returns 0,
    /// and none otherwise; that request may make the device write only the
    /// buffer `count` belongs to.
    pub(super) unsafe fn post_writer(
        &self,
        count: &AtomicU32,
        post: impl FnOnce(*mut ffi::ib_cqe) -> c_int,
    ) -> Result {
        if !self.writer {
            return Err(EINVAL);
        }
        let c = core::ptr::from_ref(count).cast_mut();
        // Acquire: a completion that brought `inflight` to 0 is done with `writes`.
        if self.inflight.load(Ordering::Acquire) == 0 {
            // Only this thread stores `writes`, and no completion reads it now.
            self.writes.store(c, Ordering::Release);
        } else if self.writes.load(Ordering::Relaxed) != c {
            return Err(EBUSY);
        }
        // INVARIANT: `writes` is `count`, which includes the request from now.
        count.fetch_add(1, Ordering::Relaxed);
        self.inflight.fetch_add(1, Ordering::Relaxed);
        let r = kernel::error::to_result(post(self.as_ptr()));
        if r.is_err() {
            // Not posted, so no completion comes for it.
            count.fetch_sub(1, Ordering::Release);
            self.inflight.fetch_sub(1, Ordering::Release);
        }
        r
    }
}

/// The `done` function of every [`Cqe`] of a `ResPtr<C>`: hands the completion to
/// its `C` with its tag.
///
/// # Safety
///
/// `wc` must be a work completion of a request posted with a [`Cqe`] for `C`,
/// and that `Cqe` and its context must still be live.
unsafe extern "C" fn wc_done<C: Completion>(_cq: *mut ffi::IbCq, wc: *mut ffi::IbWc) {
    // SAFETY: `wc` is a valid work completion by the caller's guarantee, and the
    // CQ polls it until `done` returns. A request posted with an `ib_cqe` is
    // completed through `wr_cqe`, the member of the union the CQ's code reads.
    // Fields are read in place: a failed completion leaves some unset.
    let (cqe, status) = unsafe { ((*wc).__bindgen_anon_1.wr_cqe, (*wc).status) };
    // SAFETY: The request was posted with a `Cqe`, whose first field is the
    // `ib_cqe` the completion names (`repr(C)`), and which is live.
    let c = unsafe { &*cqe.cast_const().cast::<Cqe>() };
    if c.writer {
        // The device is done with the buffer the request wrote (or, failed, will
        // not write it any more): say so before anyone hears of the completion.
        let w = c.writes.load(Ordering::Acquire);
        // SAFETY: The request was posted through `post_writer`, so `inflight`
        // counts it and `writes` is a live count that includes it, by the type
        // invariant (non-null: `post_writer` stored it before posting).
        if let Some(w) = unsafe { w.as_ref() } {
            w.fetch_sub(1, Ordering::Release);
        }
        c.inflight.fetch_sub(1, Ordering::Release);
    }
    if status == ffi::IB_WC_SUCCESS && !c.signal_success {
        return;
    }
    // SAFETY: By the `Cqe` invariant and the caller's guarantee, `ctx` is a
    // live `Arc<C>`'s `C`, whose reference its owner keeps until the CQ is
    // freed, after this callback.
    let ctx = unsafe { ArcBorrow::from_raw(c.ctx.cast::<C>()) };
    // SAFETY: `res` is the `Cqe`'s resources (set before the request was
    // posted, by the `Cqe` invariant), and their CQ runs this callback.
    let Some(res) = (unsafe { ResRef::from_raw(c.res) }) else {
        return;
    };
    let st = if status == ffi::IB_WC_SUCCESS {
        // SAFETY: As above; a successful completion has its length set.
        Ok(unsafe { (*wc).byte_len })
    } else {
        Err(WcError(status))
    };
    C::complete(ctx, FromCq(()), res, c.tag, st);
}
