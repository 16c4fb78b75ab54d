// SPDX-License-Identifier: GPL-2.0

//! The verbs a connection needs: PD, CQ, RC QP, DMA-mapped buffers, fast-registration
//! MRs, SEND/RECV and RDMA READ/WRITE, and read-back of the QP's attributes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A [`ResPtr`] owns them all. Each kernel object has a type here that frees it on
//! drop ([`Pd`], [`Cq`], [`Mr`], [`DmaBuf`]); the QP lives in the CM id, and
//! [`ResPtr::destroy`] drains and destroys it before anything else goes, then
//! drops the rest in the order MRs and buffers, CQ, PD, and last the [`Cqe`]s
//! the work requests pointed to. Every index, tag and length a caller passes is
//! checked here before C sees it; `rust/helpers/verbs.c` only reaches what Rust
//! cannot (macros, static inlines, fields of structs without a Rust layout), and
//! builds the work requests, the registration's included (its access flags and
//! rkey bump).
//! Buffers the peer accesses are exposed only through fast-registration MRs,
//! never a global rkey.
//!
//! A buffer is memory the device writes: into a posted receive or RDMA READ, and
//! on the peer's behalf at times the peer chooses once the buffer is registered
//! for remote write. No Rust reference to it is ever made: the bytes are copied
//! into or out of memory the caller owns, through [`ResPtr::read_buf`],
//! [`ResPtr::write_buf`], [`ResPtr::produce_buf`], [`ResPtr::scan_buf`] and
//! [`ResPtr::same_bytes`], each bounds-checked. A copy is a plain bulk copy
//! while the buffer is *quiet* (no request that writes it is in flight, and it
//! was never registered for remote write): then nothing but the copy itself
//! touches its bytes, as [`DmaBuf::quiet`] argues. Otherwise it is a volatile
//! copy, byte by byte, whose result may be torn but is never undefined.

use super::cq::{Completion, Cqe};
use super::ffi;
use super::id::IdPtr;
use core::cell::OnceCell;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::alloc::flags::GFP_KERNEL;
use kernel::error::{from_err_ptr, to_result};
use kernel::page::PAGE_SIZE;

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
/// fails; ULP tags are below [`QpConfig::ntags`], never this.
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
    /// The state's name (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`; `?`
    /// for a value the kernel does not define).
    pub(crate) fn state_name(&self) -> &'static str {
        match u32::from(self.state) {
            ffi::IB_QPS_RESET => "RESET",
            ffi::IB_QPS_INIT => "INIT",
            ffi::IB_QPS_RTR => "RTR",
            ffi::IB_QPS_RTS => "RTS",
            ffi::IB_QPS_SQD => "SQD",
            ffi::IB_QPS_SQE => "SQE",
            ffi::IB_QPS_ERR => "ERR",
            _ => "?",
        }
    }
}

/// Bytes the buffer accessors copy at a time through the caller's stack.
const CHUNK: usize = 256;

/// Copies `dst.len()` bytes from `src`, a plain copy if `quiet`, else with
/// volatile reads.
///
/// # Safety
///
/// `src` must be valid for reads of `dst.len()` bytes, and no reference to
/// them may exist. If `quiet`, nothing may write them during the call.
unsafe fn copy_from_dma(src: *const u8, dst: &mut [u8], quiet: bool) {
    if quiet {
        // SAFETY: Valid, unaliased and unchanging for the call by the caller's
        // guarantee; `dst` is the caller's own memory, so they do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        return;
    }
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: In bounds by the caller's guarantee. Volatile: the device may
        // write the byte meanwhile, and no reference to it exists.
        *d = unsafe { src.add(i).read_volatile() };
    }
}

/// Copies `src` to `dst`, a plain copy if `quiet`, else with volatile writes.
///
/// # Safety
///
/// `dst` must be valid for writes of `src.len()` bytes, and no reference to
/// them may exist. If `quiet`, nothing else may write them during the call (a
/// device reading them meanwhile may read them torn, nothing worse).
unsafe fn copy_to_dma(src: &[u8], dst: *mut u8, quiet: bool) {
    if quiet {
        // SAFETY: As in `copy_from_dma`.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        return;
    }
    for (i, s) in src.iter().enumerate() {
        // SAFETY: As in `copy_from_dma`.
        unsafe { dst.add(i).write_volatile(*s) };
    }
}

/// A protection domain.
///
/// # Invariants
///
/// `self.0` is a live PD, freed on drop.
struct Pd(NonNull<ffi::IbPd>);

impl Pd {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the PD exists.
    unsafe fn alloc(dev: NonNull<ffi::IbDevice>) -> Result<Self> {
        // SAFETY: `dev` is live by the caller's guarantee.
        let p = from_err_ptr(unsafe { ffi::cmecho_pd_alloc(dev.as_ptr()) })?;
        // INVARIANT: A PD was allocated.
        Ok(Self(NonNull::new(p).ok_or(ENOMEM)?))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: Live by the type invariant; whatever used it (MRs, the QP) is
        // gone first, as the owners below order their fields.
        unsafe { ffi::cmecho_pd_free(self.0.as_ptr()) };
    }
}

/// A completion queue polled on a workqueue, each completion going to the
/// [`Cqe`] of its work request.
///
/// # Invariants
///
/// `self.0` is a live CQ, freed on drop.
struct Cq(NonNull<ffi::IbCq>);

impl Cq {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the CQ exists.
    unsafe fn alloc(dev: NonNull<ffi::IbDevice>, nr_cqe: u32) -> Result<Self> {
        if i32::try_from(nr_cqe).is_err() {
            return Err(EINVAL);
        }
        // SAFETY: `dev` is live by the caller's guarantee.
        let p = from_err_ptr(unsafe { ffi::cmecho_cq_alloc(dev.as_ptr(), nr_cqe) })?;
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
struct Mr(NonNull<ffi::IbMr>);

impl Mr {
    fn alloc(pd: &Pd, max_num_sg: u32) -> Result<Self> {
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
        let _ = unsafe { ffi::cmecho_mr_free(self.0.as_ptr()) };
    }
}

/// A zeroed kmalloc buffer mapped for DMA both ways, with an MR if the peer may
/// access it.
///
/// # Invariants
///
/// `cpu` is the start of a `KVec<u8>` allocation of `len` elements and capacity
/// `cap`, owned by this buffer and mapped at `dma` on the live device `dev`;
/// `mr`, if any, was allocated for it. No Rust reference to the bytes exists.
/// `writers` is at least the number of posted requests that make the device
/// write the buffer (receives, RDMA READs) and have not completed; each was
/// posted with a writer [`Cqe`] bound to it. `remote_write` is set before the buffer is first
/// registered for remote write, and never cleared.
struct DmaBuf {
    cpu: NonNull<u8>,
    cap: usize,
    len: u32,
    dma: u64,
    dev: NonNull<ffi::IbDevice>,
    mr: Option<Mr>,
    writers: AtomicU32,
    remote_write: AtomicBool,
}

impl DmaBuf {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the buffer exists.
    unsafe fn new(dev: NonNull<ffi::IbDevice>, len: u32) -> Result<Self> {
        let v = KVec::from_elem(0u8, len as usize, GFP_KERNEL)?;
        let (cpu, n, cap) = v.into_raw_parts();
        let Some(cpu) = NonNull::new(cpu) else {
            // SAFETY: The parts came from `into_raw_parts` above and are unused.
            drop(unsafe { KVec::from_raw_parts(cpu, n, cap) });
            return Err(ENOMEM);
        };
        let mut dma = 0u64;
        // SAFETY: `cpu` is `len` bytes of kmalloc memory; `dev` is live by the
        // caller's guarantee.
        let r = to_result(unsafe {
            ffi::cmecho_dma_map(dev.as_ptr(), cpu.as_ptr().cast(), len, &mut dma)
        });
        if let Err(e) = r {
            // SAFETY: The parts came from `into_raw_parts` above and are unused.
            drop(unsafe { KVec::from_raw_parts(cpu.as_ptr(), n, cap) });
            return Err(e);
        }
        // INVARIANT: The allocation is mapped at `dma`.
        Ok(Self {
            cpu,
            cap,
            len,
            dma,
            dev,
            mr: None,
            writers: AtomicU32::new(0),
            remote_write: AtomicBool::new(false),
        })
    }

    /// Whether the device cannot write the buffer before this thread posts a
    /// request that does: none in flight, and no remote write access ever.
    ///
    /// Only a request carrying a writer [`Cqe`] bound to `writers`, or a peer
    /// holding a remote-write rkey, makes the device write a buffer (a SEND or
    /// RDMA WRITE from it, or a remote READ, only reads it: torn if the CPU
    /// writes meanwhile, never a write to race with). `writers` drops to 0 in the
    /// completion of the last of them, which comes after the device placed its
    /// data (Acquire here pairs with the Release there; the [`DmaBuf::sync`] for
    /// the CPU that follows makes the data visible, so callers ask before it).
    /// New requests are posted only through the [`ResPtr`] that holds the
    /// buffer, which is not `Sync` (the connection's mutex hands it to one
    /// thread at a time): while a copy runs, no other thread can post. The copy's
    /// own thread can, from a closure between two chunks, so a copy in chunks
    /// asks again before each.
    fn quiet(&self) -> bool {
        !self.remote_write.load(Ordering::Relaxed) && self.writers.load(Ordering::Acquire) == 0
    }

    /// Whether bytes `off..off + len` are in the buffer.
    fn holds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len)
            .is_some_and(|end| end <= self.len as usize)
    }

    fn sync(&self, for_cpu: bool) {
        // SAFETY: Mapped on the live `dev` by the type invariant.
        unsafe { ffi::cmecho_dma_sync(self.dev.as_ptr(), self.dma, self.len, for_cpu) };
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: Mapped as the type invariant says. The device no longer uses it:
        // either the QP is destroyed (`ResPtr::destroy`), or the buffer was never
        // in a slot, so no work request named it; its MR is deregistered above.
        unsafe { ffi::cmecho_dma_unmap(self.dev.as_ptr(), self.dma, self.len) };
        // SAFETY: The allocation is this buffer's own, by the type invariant.
        drop(unsafe { KVec::from_raw_parts(self.cpu.as_ptr(), self.len as usize, self.cap) });
    }
}

/// What a [`ResPtr`] frees after its QP, in field order: buffers and their MRs,
/// the CQ, the PD, then the [`Cqe`]s (the last tag's is the registrations') and
/// the writer [`Cqe`]s (one per tag, for receives and RDMA READs).
///
/// # Invariants
///
/// The fields are declared in the order they must be freed. The buffers and MRs
/// are of the device and PD of `pd`. `bufs`, `cqes` and `wcqes` are never
/// resized once built, so the addresses work requests hold stay valid (and
/// those of the buffers' `writers` counts); each slot of `bufs` is set at most
/// once.
struct Parts {
    bufs: KVec<OnceCell<DmaBuf>>,
    #[expect(dead_code, reason = "held for its drop")]
    cq: Cq,
    pd: Pd,
    cqes: KVec<Cqe>,
    wcqes: KVec<Cqe>,
}

/// The QP resources of one connection.
///
/// Dropping one without [`ResPtr::destroy`] leaks it: its QP must be drained
/// before anything under it is freed, and only `destroy` can.
///
/// # Invariants
///
/// `id` is the CM id the resources were created on; `dev` its device. `qp` is the
/// id's QP, created on `parts.pd` with `parts.cq` for both queues, and live until
/// `destroy`; `lkey` is the PD's local DMA lkey. `ctx` is a reference on an
/// `Arc<C>` taken by [`ResPtr::create`], the context of every `Cqe` in
/// `parts.cqes`, of which there are `ntags + 1`, the last for [`TAG_REG`], and
/// of every `Cqe` in `parts.wcqes`, one writer `Cqe` per tag;
/// `parts.bufs` has the `nbufs` slots of the configuration. (That the id is
/// still live is not an invariant: [`ResPtr::destroy`] requires it.) It is not
/// `Sync`: one thread at a time posts and copies ([`DmaBuf::quiet`] relies on it;
/// the raw pointers already make it so, the marker says it).
pub(crate) struct ResPtr<C: Completion> {
    id: NonNull<ffi::RdmaCmId>,
    qp: NonNull<ffi::IbQp>,
    dev: NonNull<ffi::IbDevice>,
    lkey: u32,
    ntags: u32,
    parts: ManuallyDrop<Parts>,
    ctx: *const C,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

// SAFETY: The kernel objects may be used and freed from any thread, and the
// context is an `Arc<C>` with `C: Send + Sync`, which may be dropped on any.
unsafe impl<C: Completion> Send for ResPtr<C> {}

impl<C: Completion> ResPtr<C> {
    /// Creates PD, CQ and QP on `id`; completions go to `ctx`'s [`Completion`].
    ///
    /// Fails with `ENODEV` while `id` has no device (its address is not resolved).
    pub(super) fn create(id: &IdPtr, ctx: Arc<C>, cfg: &QpConfig) -> Result<Self> {
        let ctx = Arc::into_raw(ctx);
        // SAFETY: `ctx` is a reference on an `Arc<C>`, given to `build`.
        let r = unsafe { Self::build(id, ctx, cfg) };
        if r.is_err() {
            // SAFETY: `ctx` came from `Arc::into_raw` above, and `build` kept no
            // copy of it when it failed.
            drop(unsafe { Arc::from_raw(ctx) });
        }
        r
    }

    /// # Safety
    ///
    /// `ctx` must be a reference on an `Arc<C>`. On success the result owns it;
    /// on failure it is not used.
    unsafe fn build(id: &IdPtr, ctx: *const C, cfg: &QpConfig) -> Result<Self> {
        let idp = id.as_ptr();
        let idn = NonNull::new(idp).ok_or(EINVAL)?;
        // SAFETY: `id` is live by its type invariant.
        let dev = NonNull::new(unsafe { ffi::cmecho_cm_device(idp) }).ok_or(ENODEV)?;
        let nr_cqe = cfg
            .max_send_wr
            .checked_add(cfg.max_recv_wr)
            .and_then(|n| n.checked_add(2))
            .ok_or(EINVAL)?;
        // One more in each queue for the drain work requests of `ib_drain_qp`
        // (which `nr_cqe` fits).
        let (send_wr, recv_wr) = (cfg.max_send_wr + 1, cfg.max_recv_wr + 1);
        let ncqes = (cfg.ntags as usize).checked_add(1).ok_or(EINVAL)?;
        let mut cqes = KVec::with_capacity(ncqes, GFP_KERNEL)?;
        for tag in 0..cfg.ntags {
            // SAFETY: `ctx` is kept, as the invariant says, until `destroy` has
            // drained the QP and freed the CQ.
            cqes.push(unsafe { Cqe::new(ctx, tag, true, false) }, GFP_KERNEL)?;
        }
        // SAFETY: As above.
        cqes.push(unsafe { Cqe::new(ctx, TAG_REG, false, false) }, GFP_KERNEL)?;
        let mut wcqes = KVec::with_capacity(cfg.ntags as usize, GFP_KERNEL)?;
        for tag in 0..cfg.ntags {
            // SAFETY: As above.
            wcqes.push(unsafe { Cqe::new(ctx, tag, true, true) }, GFP_KERNEL)?;
        }
        let mut bufs = KVec::with_capacity(cfg.nbufs as usize, GFP_KERNEL)?;
        for _ in 0..cfg.nbufs {
            bufs.push(OnceCell::new(), GFP_KERNEL)?;
        }
        // SAFETY: The device of a live id stays until the id's QP resources are
        // destroyed: on its removal the CM's DEVICE_REMOVAL handler destroys them
        // before it returns.
        let pd = unsafe { Pd::alloc(dev)? };
        // SAFETY: As above.
        let cq = unsafe { Cq::alloc(dev, nr_cqe)? };
        // No event handler, SRQ or XRC domain; one SGE per work request.
        let mut init = ffi::ib_qp_init_attr {
            qp_type: ffi::IB_QPT_RC,
            sq_sig_type: ffi::IB_SIGNAL_REQ_WR,
            send_cq: cq.0.as_ptr(),
            recv_cq: cq.0.as_ptr(),
            cap: ffi::ib_qp_cap {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                ..Zeroable::zeroed()
            },
            ..Zeroable::zeroed()
        };
        // SAFETY: `id` is live and has no QP yet (the connection creates one once);
        // `pd` and `cq` are live and outlive the QP (`destroy`).
        to_result(unsafe { ffi::rdma_create_qp(idp, pd.0.as_ptr(), &mut init) })?;
        // SAFETY: `id` is live; `rdma_create_qp` set its QP.
        let qp = NonNull::new(unsafe { ffi::cmecho_cm_qp(idp) }).ok_or(EINVAL)?;
        // SAFETY: `pd` is live.
        let lkey = unsafe { ffi::cmecho_pd_lkey(pd.0.as_ptr()) };
        // INVARIANT: As built above; the id is the caller's.
        Ok(Self {
            id: idn,
            qp,
            dev,
            lkey,
            ntags: cfg.ntags,
            parts: ManuallyDrop::new(Parts {
                bufs,
                cq,
                pd,
                cqes,
                wcqes,
            }),
            ctx,
            _not_sync: PhantomData,
        })
    }

    /// Drains and destroys the QP, frees everything, and drops the context reference.
    ///
    /// # Safety
    ///
    /// The CM id the resources were created on must still be live, and the caller
    /// must not be one of these resources' own completion callbacks (the drain
    /// waits for them).
    pub(super) unsafe fn destroy(self) {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: The QP is live by the type invariant, its id by the caller's
        // guarantee. After the drain every posted request has completed, and no
        // completion callback runs for it any more.
        unsafe {
            ffi::ib_drain_qp(me.qp.as_ptr());
            ffi::rdma_destroy_qp(me.id.as_ptr());
        }
        // SAFETY: Dropped once, here; the QP that used the parts is gone, and
        // `Cq`'s drop waits for the CQ's work before the `Cqe`s go.
        unsafe { ManuallyDrop::drop(&mut me.parts) };
        // SAFETY: By the type invariant `ctx` is the reference `create` took on an
        // `Arc<C>`, and no `Cqe` uses it any more.
        drop(unsafe { Arc::from_raw(me.ctx) });
    }

    /// What the provider reports for the QP (`ib_query_qp`).
    pub(crate) fn query_qp(&self) -> Result<QpAttrs> {
        let mut a = QpAttrs::default();
        // SAFETY: The QP is live by the type invariant; the out pointers are valid.
        to_result(unsafe {
            ffi::cmecho_qp_query(
                self.qp.as_ptr(),
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
    ///
    /// `EINVAL` for a slot out of range or a zero length, `EBUSY` for a slot
    /// already allocated; a failure leaves the slot empty.
    pub(crate) fn alloc_buf(&self, idx: u32, len: u32, remote: bool) -> Result {
        let slot = self.parts.bufs.get(idx as usize).ok_or(EINVAL)?;
        if len == 0 {
            return Err(EINVAL);
        }
        if slot.get().is_some() {
            return Err(EBUSY);
        }
        // SAFETY: `dev` is live while the resources are (see `build`).
        let mut b = unsafe { DmaBuf::new(self.dev, len)? };
        if remote {
            let pages = (len as usize).div_ceil(PAGE_SIZE) + 1;
            b.mr = Some(Mr::alloc(&self.parts.pd, u32::try_from(pages)?)?);
        }
        slot.set(b).map_err(|_| EBUSY)
    }

    /// Buffer `idx`, if it is allocated.
    fn slot(&self, idx: u32) -> Result<&DmaBuf> {
        self.parts
            .bufs
            .get(idx as usize)
            .and_then(OnceCell::get)
            .ok_or(EINVAL)
    }

    /// The `Cqe` of ULP tag `tag`.
    fn cqe(&self, tag: u32) -> Result<*mut ffi::ib_cqe> {
        if tag >= self.ntags {
            return Err(EINVAL);
        }
        Ok(self.parts.cqes[tag as usize].as_ptr())
    }

    /// The `Cqe` of `tag` and the DMA address of bytes `off..off + len` of
    /// buffer `idx`; `EINVAL` if either is not there.
    fn prep(&self, tag: u32, idx: u32, off: u32, len: u32) -> Result<(*mut ffi::ib_cqe, u64)> {
        let cqe = self.cqe(tag)?;
        let b = self.slot(idx)?;
        if !b.holds(off as usize, len as usize) {
            return Err(EINVAL);
        }
        Ok((cqe, b.dma + u64::from(off)))
    }

    /// Registers buffer `idx` for remote READ (or WRITE) access; returns (rkey, address).
    /// A buffer once registered for remote write is copied with volatile
    /// accesses from then on, whatever follows.
    pub(crate) fn reg_buf(&self, idx: u32, remote_write: bool) -> Result<(u32, u64)> {
        let b = self.slot(idx)?;
        let mr = b.mr.as_ref().ok_or(EINVAL)?;
        if remote_write {
            // Before the peer can learn the rkey: from here the device may write
            // the buffer at any time (see `DmaBuf::quiet`).
            b.remote_write.store(true, Ordering::Relaxed);
        }
        let reg = self.parts.cqes[self.ntags as usize].as_ptr();
        let mut rkey = 0u32;
        let mut addr = 0u64;
        // SAFETY: QP, MR and buffer are live by the type invariants; the MR was
        // allocated for this buffer's pages; `reg` lives until the QP is drained.
        to_result(unsafe {
            ffi::cmecho_post_reg(
                self.qp.as_ptr(),
                mr.0.as_ptr(),
                b.dma,
                b.len,
                remote_write,
                reg,
                &mut rkey,
                &mut addr,
            )
        })?;
        Ok((rkey, addr))
    }

    /// Runs `f` on the address of bytes `off..off + len` of buffer `idx`, synced
    /// for the CPU before and for the device after; `EINVAL` when they are not
    /// in it. `f`'s first argument tells whether the buffer is quiet
    /// ([`DmaBuf::quiet`]): it was before the sync, and still is.
    fn access<R>(
        &self,
        idx: u32,
        off: usize,
        len: usize,
        f: impl FnOnce(&dyn Fn() -> bool, *mut u8) -> R,
    ) -> Result<R> {
        let b = self.slot(idx)?;
        if !b.holds(off, len) {
            return Err(EINVAL);
        }
        let was_quiet = b.quiet();
        b.sync(true);
        let quiet = || was_quiet && b.quiet();
        // SAFETY: `off` is within the buffer, checked above.
        let r = f(&quiet, unsafe { b.cpu.as_ptr().add(off) });
        b.sync(false);
        Ok(r)
    }

    /// Copies bytes `off..off + dst.len()` of buffer `idx` into `dst`.
    pub(crate) fn read_buf(&self, idx: u32, off: u32, dst: &mut [u8]) -> Result {
        self.access(idx, off as usize, dst.len(), |quiet, p| {
            // SAFETY: `access` checked that the bytes are in the buffer, which lives
            // as long as the resources and to which no reference exists (`DmaBuf`
            // invariant); a quiet buffer stays so during the copy (`DmaBuf::quiet`).
            unsafe { copy_from_dma(p, dst, quiet()) }
        })
    }

    /// Copies `src` into buffer `idx` at `off`.
    pub(crate) fn write_buf(&self, idx: u32, off: u32, src: &[u8]) -> Result {
        self.access(idx, off as usize, src.len(), |quiet, p| {
            // SAFETY: As in `read_buf`.
            unsafe { copy_to_dma(src, p, quiet()) }
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
        self.access(idx, 0, len, |quiet, p| {
            let mut bounce = [0u8; CHUNK];
            let mut at = 0;
            while at < len {
                let c = &mut bounce[..CHUNK.min(len - at)];
                f(at, c);
                // SAFETY: `at + c.len() <= len`, which `access` checked; as in
                // `read_buf` otherwise. Quiet is asked for each chunk: `f` may
                // have posted.
                unsafe { copy_to_dma(c, p.add(at), quiet()) };
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
        self.access(idx, 0, len, |quiet, p| {
            let mut bounce = [0u8; CHUNK];
            let mut at = 0;
            while at < len {
                let c = &mut bounce[..CHUNK.min(len - at)];
                // SAFETY: As in `produce_buf`.
                unsafe { copy_from_dma(p.add(at), c, quiet()) };
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
        let len = self.slot(a)?.len as usize;
        if self.slot(b)?.len as usize != len {
            return Ok(false);
        }
        if a == b {
            return Ok(true);
        }
        // One sync of each buffer around the whole comparison.
        self.access(b, 0, len, |quiet_b, pb| {
            self.access(a, 0, len, |quiet_a, pa| {
                let (qa, qb) = (quiet_a(), quiet_b());
                let (mut x, mut y) = ([0u8; CHUNK], [0u8; CHUNK]);
                let mut at = 0;
                while at < len {
                    let n = CHUNK.min(len - at);
                    // SAFETY: `at + n <= len`, the length of both buffers, which
                    // `access` checked; as in `read_buf` otherwise (nothing here
                    // posts).
                    unsafe {
                        copy_from_dma(pa.add(at), &mut x[..n], qa);
                        copy_from_dma(pb.add(at), &mut y[..n], qb);
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
        to_result(unsafe { ffi::cmecho_post_send(self.qp.as_ptr(), cqe, addr, len, self.lkey) })
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
                    ffi::cmecho_post_rdma(
                        self.qp.as_ptr(),
                        cqe,
                        false,
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
            ffi::cmecho_post_rdma(
                self.qp.as_ptr(),
                cqe,
                write,
                addr,
                len,
                self.lkey,
                raddr,
                rkey,
            )
        })
    }
}
