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
//!
//! A buffer is memory the device writes on the peer's behalf, at times the peer
//! chooses (an RDMA WRITE into a registered buffer, or a peer breaking the protocol).
//! No Rust reference to it is ever made: the bytes are copied with volatile accesses
//! into or out of memory the caller owns, through [`ResPtr::read_buf`],
//! [`ResPtr::write_buf`], [`ResPtr::produce_buf`], [`ResPtr::scan_buf`] and
//! [`ResPtr::same_bytes`], each bounds-checked.

use super::cq::{complete, Completion};
use super::ffi;
use super::id::IdPtr;
use core::marker::PhantomData;
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

/// Bytes the buffer accessors copy at a time through the caller's stack.
const CHUNK: usize = 256;

/// Copies `dst.len()` bytes from `src` with volatile reads.
///
/// # Safety
///
/// `src` must be valid for reads of `dst.len()` bytes.
unsafe fn copy_from_dma(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: In bounds by the caller's guarantee. Volatile: the device may
        // write the byte meanwhile, and no reference to it exists.
        *d = unsafe { src.add(i).read_volatile() };
    }
}

/// Copies `src` to `dst` with volatile writes.
///
/// # Safety
///
/// `dst` must be valid for writes of `src.len()` bytes.
unsafe fn copy_to_dma(src: &[u8], dst: *mut u8) {
    for (i, s) in src.iter().enumerate() {
        // SAFETY: As above.
        unsafe { dst.add(i).write_volatile(*s) };
    }
}

/// The QP resources of one connection.
///
/// # Invariants
///
/// `self.ptr` is a live `struct cmecho_res` whose completion context is a reference
/// on an `Arc<C>` taken by [`ResPtr::create`] and whose completion callback is
/// `complete::<C>`; [`ResPtr::destroy`] releases both. The CM id it was created
/// on, which holds its QP, is live as long as it is (`destroy` requires it).
pub(crate) struct ResPtr<C: Completion> {
    ptr: NonNull<ffi::Res>,
    _ctx: PhantomData<Arc<C>>,
}

// SAFETY: The bundle may be used from any thread; the callers serialise its use
// through the connection's `res` lock. The context it holds is an `Arc<C>` with
// `C: Send + Sync`.
unsafe impl<C: Completion> Send for ResPtr<C> {}

impl<C: Completion> ResPtr<C> {
    /// Creates PD, CQ and QP on `id`; completions go to `ctx`'s [`Completion`].
    ///
    /// Fails with `ENODEV` while `id` has no device (its address is not resolved).
    pub(super) fn create(id: &IdPtr, ctx: Arc<C>, cfg: &QpConfig) -> Result<Self> {
        let raw = Arc::into_raw(ctx).cast_mut().cast::<c_void>();
        // SAFETY: `id` is live by its type invariant (the helper refuses an id with
        // no device); `raw` is an `Arc<C>` reference that stays valid until
        // `destroy`, which drains the QP first, and `complete::<C>` reads it as one.
        let res = unsafe {
            ffi::cmecho_res_create(
                id.as_ptr(),
                Some(complete::<C>),
                raw,
                cfg.ntags,
                cfg.nbufs,
                cfg.max_send_wr,
                cfg.max_recv_wr,
            )
        };
        match from_err_ptr(res) {
            // INVARIANT: The bundle is live, with the context and callback above.
            Ok(p) => Ok(Self {
                ptr: NonNull::new(p).ok_or(ENOMEM)?,
                _ctx: PhantomData,
            }),
            Err(e) => {
                // SAFETY: `raw` came from `Arc::into_raw` above and was not kept.
                drop(unsafe { Arc::from_raw(raw.cast::<C>()) });
                Err(e)
            }
        }
    }

    /// Drains and destroys the QP, frees everything, and drops the context reference.
    ///
    /// # Safety
    ///
    /// The CM id the resources were created on must still be live, and the caller
    /// must not be one of these resources' own completion callbacks (the drain
    /// waits for them).
    pub(super) unsafe fn destroy(self) {
        // SAFETY: By the type invariant the bundle is live; `self` is consumed.
        let ctx = unsafe { ffi::cmecho_res_ctx(self.ptr.as_ptr()) };
        // SAFETY: As above, and the id under it is live by the caller's guarantee;
        // after this no completion callback runs.
        unsafe { ffi::cmecho_res_destroy(self.ptr.as_ptr()) };
        // SAFETY: By the type invariant `ctx` is the reference `create` took on an
        // `Arc<C>`, and nothing uses it any more.
        drop(unsafe { Arc::from_raw(ctx.cast_const().cast::<C>()) });
    }

    fn as_ptr(&self) -> *mut ffi::Res {
        self.ptr.as_ptr()
    }

    /// What the provider reports for the QP (`ib_query_qp`).
    pub(crate) fn query_qp(&self) -> Result<QpAttrs> {
        let mut a = QpAttrs::default();
        // SAFETY: The bundle and the id holding its QP are live by the type
        // invariant; the out pointers are valid.
        to_result(unsafe {
            ffi::cmecho_res_query_qp(
                self.as_ptr(),
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

    /// The CPU address and length of buffer `idx`, if it is allocated.
    fn buf(&self, idx: u32) -> Result<(*mut u8, usize)> {
        let mut len = 0u32;
        // SAFETY: The bundle is live by the type invariant; the helper checks `idx`
        // and returns null for a bad one.
        let p = unsafe { ffi::cmecho_res_buf_cpu(self.as_ptr(), idx, &mut len) };
        if p.is_null() {
            return Err(EINVAL);
        }
        Ok((p, len as usize))
    }

    /// Runs `f` on the address of bytes `off..off + len` of buffer `idx`, synced for
    /// the CPU before and for the device after; `EINVAL` when they are not in it.
    fn access<R>(
        &self,
        idx: u32,
        off: usize,
        len: usize,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R> {
        let (p, blen) = self.buf(idx)?;
        match off.checked_add(len) {
            Some(end) if end <= blen => {}
            _ => return Err(EINVAL),
        }
        // SAFETY: The bundle is live by the type invariant; `idx` is valid.
        unsafe { ffi::cmecho_res_buf_sync(self.as_ptr(), idx, true) };
        // SAFETY: `off` is within the buffer, checked above.
        let r = f(unsafe { p.add(off) });
        // SAFETY: As above.
        unsafe { ffi::cmecho_res_buf_sync(self.as_ptr(), idx, false) };
        Ok(r)
    }

    /// Copies bytes `off..off + dst.len()` of buffer `idx` into `dst`.
    pub(crate) fn read_buf(&self, idx: u32, off: u32, dst: &mut [u8]) -> Result {
        self.access(idx, off as usize, dst.len(), |p| {
            // SAFETY: `access` checked that the bytes are in the buffer, which lives
            // as long as the bundle.
            unsafe { copy_from_dma(p, dst) }
        })
    }

    /// Copies `src` into buffer `idx` at `off`.
    pub(crate) fn write_buf(&self, idx: u32, off: u32, src: &[u8]) -> Result {
        self.access(idx, off as usize, src.len(), |p| {
            // SAFETY: As in `read_buf`.
            unsafe { copy_to_dma(src, p) }
        })
    }

    /// Writes the first `len` bytes of buffer `idx` with what `f` produces: `f(at,
    /// chunk)` fills `chunk` (at most 256 bytes, in order) with the bytes at
    /// `at..at + chunk.len()`.
    pub(crate) fn produce_buf(
        &self,
        idx: u32,
        len: u32,
        mut f: impl FnMut(usize, &mut [u8]),
    ) -> Result {
        let len = len as usize;
        self.access(idx, 0, len, |p| {
            let mut bounce = [0u8; CHUNK];
            let mut at = 0;
            while at < len {
                let c = &mut bounce[..CHUNK.min(len - at)];
                f(at, c);
                // SAFETY: `at + c.len() <= len`, which `access` checked.
                unsafe { copy_to_dma(c, p.add(at)) };
                at += c.len();
            }
        })
    }

    /// Hands the first `len` bytes of buffer `idx` to `f` in order, at most 256 at a
    /// time as `f(at, chunk)`, while `f` returns true; whether it always did.
    pub(crate) fn scan_buf(
        &self,
        idx: u32,
        len: u32,
        mut f: impl FnMut(usize, &[u8]) -> bool,
    ) -> Result<bool> {
        let len = len as usize;
        self.access(idx, 0, len, |p| {
            let mut bounce = [0u8; CHUNK];
            let mut at = 0;
            while at < len {
                let c = &mut bounce[..CHUNK.min(len - at)];
                // SAFETY: `at + c.len() <= len`, which `access` checked.
                unsafe { copy_from_dma(p.add(at), c) };
                if !f(at, c) {
                    return false;
                }
                at += c.len();
            }
            true
        })
    }

    /// Whether buffers `a` and `b` have the same length and bytes.
    pub(crate) fn same_bytes(&self, a: u32, b: u32) -> Result<bool> {
        let (_, len) = self.buf(a)?;
        let (_, lb) = self.buf(b)?;
        if lb != len {
            return Ok(false);
        }
        if a == b {
            return Ok(true);
        }
        // One sync of each buffer around the whole comparison.
        self.access(b, 0, len, |pb| {
            self.access(a, 0, len, |pa| {
                let (mut x, mut y) = ([0u8; CHUNK], [0u8; CHUNK]);
                let mut at = 0;
                while at < len {
                    let n = CHUNK.min(len - at);
                    // SAFETY: `at + n <= len`, the length of both buffers, which
                    // `access` checked.
                    unsafe {
                        copy_from_dma(pa.add(at), &mut x[..n]);
                        copy_from_dma(pb.add(at), &mut y[..n]);
                    }
                    if x[..n] != y[..n] {
                        return false;
                    }
                    at += n;
                }
                true
            })
        })?
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
