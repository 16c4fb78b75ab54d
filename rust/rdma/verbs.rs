// SPDX-License-Identifier: GPL-2.0

//! The verbs a connection needs: PD, CQ, RC QP, DMA-mapped buffers, fast-registration
//! MRs, SEND/RECV and RDMA READ/WRITE, and read-back of the QP's attributes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The objects live in one C bundle (`struct cmecho_res`, `rust/helpers/verbs.c`)
//! owned by a [`ResPtr`]; its teardown drains the QP before anything is freed, in the
//! order QP, MRs, buffers, CQ, PD. Buffers the peer accesses are exposed only through
//! fast-registration MRs, never a global rkey.

use super::ffi;
use core::fmt;
use core::ptr::NonNull;
use kernel::error::{from_err_ptr, to_result};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The size of the QP and its work request bookkeeping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpConfig {
    /// Distinct completion tags the ULP uses (`0..ntags`).
    pub(crate) ntags: u32,
    /// Buffer slots (`0..nbufs`).
    pub(crate) nbufs: u32,
    /// Send queue depth.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth.
    pub(crate) max_recv_wr: u32,
}

/// The tag a fast registration ([`ResPtr::reg_buf`]) completes with, only when it
/// fails (`CMECHO_TAG_REG`); ULP tags are below [`QpConfig::ntags`], never this.
pub(crate) const TAG_REG: u32 = u32::MAX;

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

/// What the provider reports for a QP (`ib_query_qp`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpAttrs {
    /// QP number.
    pub(crate) qp_num: u32,
    /// QP state (`enum ib_qp_state`), see [`QpAttrs::state_name`].
    pub(crate) state: u8,
    /// Local ACK timeout exponent.
    pub(crate) timeout: u8,
    /// Transport retry count.
    pub(crate) retry_cnt: u8,
    /// RNR retry count.
    pub(crate) rnr_retry: u8,
    /// Minimum RNR NAK timer code.
    pub(crate) min_rnr_timer: u8,
    /// Path MTU in bytes.
    pub(crate) path_mtu: u32,
}

impl QpAttrs {
    /// The state's name (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`).
    pub(crate) fn state_name(&self) -> &'static str {
        // SAFETY: Pure function of an integer returning a static string.
        let s = unsafe { CStr::from_char_ptr(ffi::cmecho_qp_state_str(self.state)) };
        s.to_str().unwrap_or("?")
    }
}

/// Reads back the attributes of the QP of `id`.
pub(crate) fn query_qp(id: *mut ffi::RdmaCmId) -> Result<QpAttrs> {
    let mut a = QpAttrs::default();
    // SAFETY: The caller holds the connection lock with the id present, so the id is
    // live; the out pointers are valid.
    to_result(unsafe {
        ffi::cmecho_cm_query_qp(
            id,
            &mut a.qp_num,
            &mut a.state,
            &mut a.timeout,
            &mut a.retry_cnt,
            &mut a.rnr_retry,
            &mut a.min_rnr_timer,
            &mut a.path_mtu,
        )
    })?;
    Ok(a)
}

/// The QP resources of one connection.
///
/// # Invariants
///
/// `self.0` is a live `struct cmecho_res` whose completion context is a reference
/// on an `Arc<C>` taken by [`ResPtr::create`], released by [`ResPtr::destroy`].
pub(crate) struct ResPtr(NonNull<ffi::Res>);

// SAFETY: The bundle may be used from any thread; the callers serialise its use
// through the connection's lock.
unsafe impl Send for ResPtr {}

impl ResPtr {
    /// Creates PD, CQ and QP on `id`; completions go to `done` with `ctx`.
    pub(crate) fn create<C: Send + Sync>(
        id: *mut ffi::RdmaCmId,
        ctx: Arc<C>,
        cfg: &QpConfig,
        done: ffi::CompletionFn,
    ) -> Result<Self> {
        let raw = Arc::into_raw(ctx).cast_mut().cast::<c_void>();
        // SAFETY: The caller passes a live id with a resolved route; `raw` stays valid
        // until `destroy`, which drains the QP first.
        let res = unsafe {
            ffi::cmecho_res_create(
                id,
                done,
                raw,
                cfg.ntags,
                cfg.nbufs,
                cfg.max_send_wr,
                cfg.max_recv_wr,
            )
        };
        match from_err_ptr(res) {
            Ok(p) => Ok(Self(NonNull::new(p).ok_or(ENOMEM)?)),
            Err(e) => {
                // SAFETY: `raw` came from `Arc::into_raw` above and was not kept.
                drop(unsafe { Arc::from_raw(raw.cast::<C>()) });
                Err(e)
            }
        }
    }

    /// Drains and destroys the QP, frees everything, and drops the context reference.
    ///
    /// Must not be called from one of these resources' own completion callbacks.
    pub(crate) fn destroy<C: Send + Sync>(self) {
        // SAFETY: By the type invariant the bundle is live; `self` is consumed.
        let ctx = unsafe { ffi::cmecho_res_ctx(self.0.as_ptr()) };
        // SAFETY: As above; after this no completion callback runs.
        unsafe { ffi::cmecho_res_destroy(self.0.as_ptr()) };
        // SAFETY: By the type invariant `ctx` is the reference `create` took on an
        // `Arc<C>`, and nothing uses it any more.
        drop(unsafe { Arc::from_raw(ctx.cast_const().cast::<C>()) });
    }

    fn as_ptr(&self) -> *mut ffi::Res {
        self.0.as_ptr()
    }

    /// Allocates and DMA-maps buffer slot `idx` of `len` bytes; `remote` gives it a
    /// fast-registration MR so the peer may access it once registered.
    pub(crate) fn alloc_buf(&self, idx: u32, len: u32, remote: bool) -> Result {
        // SAFETY: The bundle is live by the type invariant; the helper checks `idx`.
        to_result(unsafe { ffi::cmecho_res_buf_alloc(self.as_ptr(), idx, len, remote) })
    }

    /// Registers buffer `idx` for remote READ (or WRITE) access; returns (rkey, address).
    pub(crate) fn reg_buf(&self, idx: u32, remote_write: bool) -> Result<(u32, u64)> {
        let mut rkey = 0u32;
        let mut addr = 0u64;
        // SAFETY: As above; the out pointers are valid.
        to_result(unsafe {
            ffi::cmecho_res_buf_reg(self.as_ptr(), idx, remote_write, &mut rkey, &mut addr)
        })?;
        Ok((rkey, addr))
    }

    /// Runs `f` on the bytes of buffer `idx`, synced for the CPU before and for the
    /// device after.
    pub(crate) fn with_buf<R>(&self, idx: u32, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let mut len = 0u32;
        // SAFETY: As above; the helper checks `idx` and returns null for a bad one.
        let p = unsafe { ffi::cmecho_res_buf_cpu(self.as_ptr(), idx, &mut len) };
        if p.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: As above, `idx` is valid.
        unsafe { ffi::cmecho_res_buf_sync(self.as_ptr(), idx, true) };
        // SAFETY: The helper returned the buffer's start and length; the buffer lives
        // as long as the bundle, which the caller's lock keeps alive, and the lock also
        // keeps other CPU users out.
        let bytes = unsafe { core::slice::from_raw_parts_mut(p, len as usize) };
        let r = f(bytes);
        // SAFETY: As above.
        unsafe { ffi::cmecho_res_buf_sync(self.as_ptr(), idx, false) };
        Ok(r)
    }

    /// Posts a receive of `len` bytes into buffer `idx` at `off`, completing with `tag`.
    pub(crate) fn post_recv(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        // SAFETY: As above; the helper checks tag, index and bounds.
        to_result(unsafe { ffi::cmecho_post_recv(self.as_ptr(), tag, idx, off, len) })
    }

    /// Posts a signaled SEND of `len` bytes from buffer `idx` at `off`.
    pub(crate) fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        // SAFETY: As above.
        to_result(unsafe { ffi::cmecho_post_send(self.as_ptr(), tag, idx, off, len) })
    }

    /// Posts a signaled RDMA READ (or WRITE) between buffer `idx` at `off` and the
    /// peer's `raddr`/`rkey`.
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn post_rdma(
        &self,
        tag: u32,
        write: bool,
        idx: u32,
        off: u32,
        len: u32,
        raddr: u64,
        rkey: u32,
    ) -> Result {
        // SAFETY: As above. A bad remote address or rkey fails the work request with
        // a remote access error, not the local side.
        to_result(unsafe {
            ffi::cmecho_post_rdma(self.as_ptr(), tag, write, idx, off, len, raddr, rkey)
        })
    }
}
