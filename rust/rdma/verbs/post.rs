// SPDX-License-Identifier: GPL-2.0

//! Posting work requests: receives, SENDs, RDMA READs and WRITEs, each with
//! its tag, buffer, offset and length checked before C sees them.

use super::*;

/// Every work request of the send queue but a registration is signaled: its
/// completion is what tells the connection the buffer is free again.
const SIGNALED: ffi::ib_send_flags = ffi::IB_SEND_SIGNALED;

impl<C: Completion> ResPtr<C> {
    /// Posts a receive of `len` bytes into buffer `idx` at `off`, completing with `tag`.
    ///
    /// `EBUSY` while receives or RDMA READs of `tag` into another buffer are in
    /// flight: a tag's requests that write a buffer write one at a time.
    pub(crate) fn post_recv(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        let post = |cqe, addr| {
            // SAFETY: The QP is live by the type invariant; `addr..addr + len` is
            // in a mapped buffer of its PD, and `cqe` lives until the QP is drained.
            unsafe { ffi::cmecho_post_recv(self.qp.as_ptr(), cqe, addr, len, self.lkey) }
        };
        // SAFETY: `post` posts one receive of `len` bytes at `addr`, or none when
        // it fails.
        unsafe { self.post_writer(tag, idx, off, len, post) }
    }

    /// Posts, through `post(cqe, addr)`, a request with `tag` that makes the
    /// device write bytes `off..off + len` (at DMA address `addr`) of buffer
    /// `idx`, counted in the buffer's `writers` until it completes.
    ///
    /// # Safety
    ///
    /// `post` must post exactly one work request carrying `cqe` when it returns
    /// 0, and none otherwise; that request may make the device write only
    /// `len` bytes at `addr`.
    unsafe fn post_writer(
        &self,
        tag: u32,
        idx: u32,
        off: u32,
        len: u32,
        post: impl FnOnce(*mut ffi::ib_cqe, u64) -> kernel::ffi::c_int,
    ) -> Result {
        let cqe = self.parts.wcqes.get(tag as usize).ok_or(EINVAL)?;
        let b = self.slot(idx)?;
        if !b.holds(off as usize, len as usize) {
            return Err(EINVAL);
        }
        let addr = b.dma + u64::from(off);
        // SAFETY: Only the thread holding `self`, which is not `Sync`, posts. The
        // buffer, and so its `writers`, lives until `destroy` has drained the QP.
        // `post` posts one request writing only this buffer, by the caller's
        // guarantee.
        unsafe { cqe.post_writer(&b.writers, |c| post(c, addr)) }
    }

    /// Posts a signaled SEND of `len` bytes from buffer `idx` at `off`.
    pub(crate) fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        let (cqe, addr) = self.prep(tag, idx, off, len)?;
        // SAFETY: As in `post_recv`.
        to_result(unsafe {
            ffi::cmecho_post_send(
                self.qp.as_ptr(),
                cqe,
                ffi::IB_WR_SEND,
                SIGNALED,
                addr,
                len,
                self.lkey,
                0,
                0,
            )
        })
    }

    /// Posts a signaled RDMA READ (or WRITE) between buffer `idx` at `off` and the
    /// peer's `raddr`/`rkey`; `EINVAL` for a zero length. A READ writes the buffer,
    /// and is refused with `EBUSY` as a receive is ([`ResPtr::post_recv`]).
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
        if len == 0 {
            return Err(EINVAL);
        }
        if !write {
            // An RDMA READ writes the local buffer.
            let post = |cqe, addr| {
                // SAFETY: As in `post_recv`. A bad remote address or rkey fails the
                // work request with a remote access error, not the local side.
                unsafe {
                    ffi::cmecho_post_send(
                        self.qp.as_ptr(),
                        cqe,
                        ffi::IB_WR_RDMA_READ,
                        SIGNALED,
                        addr,
                        len,
                        self.lkey,
                        raddr,
                        rkey,
                    )
                }
            };
            // SAFETY: `post` posts one RDMA READ into `len` bytes at `addr`, or
            // none when it fails.
            return unsafe { self.post_writer(tag, idx, off, len, post) };
        }
        let (cqe, addr) = self.prep(tag, idx, off, len)?;
        // SAFETY: As in `post_recv`. A bad remote address or rkey fails the work
        // request with a remote access error, not the local side.
        to_result(unsafe {
            ffi::cmecho_post_send(
                self.qp.as_ptr(),
                cqe,
                ffi::IB_WR_RDMA_WRITE,
                SIGNALED,
                addr,
                len,
                self.lkey,
                raddr,
                rkey,
            )
        })
    }
}
