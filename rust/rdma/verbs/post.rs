// SPDX-License-Identifier: GPL-2.0

//! Posting work requests: receives, SENDs, RDMA READs and WRITEs, each with
//! its tag, buffer, offset and length checked before the device sees them.

use super::*;
use kernel::ffi::c_int;

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
            let mut sge = ffi::ib_sge {
                addr,
                length: len,
                lkey: self.lkey,
            };
            let wr = ffi::ib_recv_wr {
                __bindgen_anon_1: ffi::ib_recv_wr__bindgen_ty_1 { wr_cqe: cqe },
                sg_list: &mut sge,
                num_sge: 1,
                ..Zeroable::zeroed()
            };
            // SAFETY: The QP is live by the type invariant; `addr..addr + len` is
            // in a mapped buffer of its PD, and `cqe` lives until the CQ is
            // freed. The provider copies the request and its SGE before it
            // returns.
            unsafe { ffi::cmecho_post_recv(self.qp.as_ptr(), &wr) }
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
        // SAFETY: Only the thread holding `self` (a `Held`) posts. The
        // buffer, and so its `writers`, lives until `destroy` has freed the CQ.
        // `post` posts one request writing only this buffer, by the caller's
        // guarantee.
        unsafe { cqe.post_writer(&b.writers, |c| post(c, addr)) }
    }

    /// Posts a signaled SEND of `len` bytes from buffer `idx` at `off`.
    pub(crate) fn post_send(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result {
        let (cqe, addr) = self.prep(tag, idx, off, len)?;
        // SAFETY: `prep` checked the tag and the buffer's bounds: `cqe` is this
        // QP's and `addr` is mapped for `len` bytes. A SEND has no remote side.
        to_result(unsafe { self.post_sq(cqe, ffi::IB_WR_SEND, addr, len, 0, 0) })
    }

    /// Posts a signaled RDMA WRITE of zero bytes, with no buffer, no remote
    /// address and no rkey: a probe that the peer's device acknowledges
    /// without its software, and that touches no memory on either side (a
    /// zero-length RDMA WRITE carries no address or rkey the responder
    /// checks, IBTA C9-88; the CM gives every connected QP remote write
    /// access). It is retried, and fails, as any request of the send queue.
    pub(crate) fn post_probe(&self, tag: u32) -> Result {
        let cqe = self.cqe(tag)?;
        let wr = ffi::ib_rdma_wr {
            wr: ffi::ib_send_wr {
                __bindgen_anon_1: ffi::ib_send_wr__bindgen_ty_1 { wr_cqe: cqe },
                sg_list: core::ptr::null_mut(),
                num_sge: 0,
                opcode: ffi::IB_WR_RDMA_WRITE,
                send_flags: SIGNALED as c_int,
                ..Zeroable::zeroed()
            },
            remote_addr: 0,
            rkey: 0,
        };
        // SAFETY: The QP is live by the type invariant and `cqe` is one of its
        // completion entries, which lives until the CQ is freed. With no SGE
        // the device reads and writes no local memory; the provider copies the
        // request before it returns. The pointer is to the whole `ib_rdma_wr`,
        // as in `post_sq`.
        to_result(unsafe { ffi::cmecho_post_send(self.qp.as_ptr(), (&raw const wr).cast()) })
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
        // A bad remote address or rkey fails the work request with a remote
        // access error, not the local side.
        if !write {
            // An RDMA READ writes the local buffer.
            let post = |cqe, addr| {
                // SAFETY: `post_writer` passes this QP's writer `cqe` and the
                // DMA address of `len` checked bytes.
                unsafe { self.post_sq(cqe, ffi::IB_WR_RDMA_READ, addr, len, raddr, rkey) }
            };
            // SAFETY: `post` posts one RDMA READ into `len` bytes at `addr`, or
            // none when it fails.
            return unsafe { self.post_writer(tag, idx, off, len, post) };
        }
        let (cqe, addr) = self.prep(tag, idx, off, len)?;
        // SAFETY: As for `post_send`.
        to_result(unsafe { self.post_sq(cqe, ffi::IB_WR_RDMA_WRITE, addr, len, raddr, rkey) })
    }

    /// Posts one signaled send-queue work request of `opcode` on `len` bytes
    /// at DMA address `addr`, and for an RDMA READ or WRITE the peer's
    /// `raddr`/`rkey`; `ib_post_send`'s return value.
    ///
    /// # Safety
    ///
    /// `cqe` must be a completion entry of these resources, which lives until
    /// the CQ is freed, and `addr..addr + len` must lie in a buffer of their
    /// PD, mapped for DMA.
    unsafe fn post_sq(
        &self,
        cqe: *mut ffi::ib_cqe,
        opcode: ffi::ib_wr_opcode,
        addr: u64,
        len: u32,
        raddr: u64,
        rkey: u32,
    ) -> kernel::ffi::c_int {
        let mut sge = ffi::ib_sge {
            addr,
            length: len,
            lkey: self.lkey,
        };
        let wr = ffi::ib_rdma_wr {
            wr: ffi::ib_send_wr {
                __bindgen_anon_1: ffi::ib_send_wr__bindgen_ty_1 { wr_cqe: cqe },
                sg_list: &mut sge,
                num_sge: 1,
                opcode,
                send_flags: SIGNALED as c_int,
                ..Zeroable::zeroed()
            },
            remote_addr: raddr,
            rkey,
        };
        // SAFETY: The QP is live by the type invariant; `cqe` and the buffer
        // are valid by the caller's guarantee. The provider copies the request
        // and its SGE before it returns; the verbs core reads `raddr`/`rkey`
        // from the `ib_rdma_wr` around `wr` for an RDMA READ or WRITE only.
        // The pointer is to the whole `ib_rdma_wr`, which the provider reaches
        // from `wr` (`container_of`), not to its first member alone.
        unsafe { ffi::cmecho_post_send(self.qp.as_ptr(), (&raw const wr).cast()) }
    }
}
