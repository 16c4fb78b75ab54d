// SPDX-License-Identifier: GPL-2.0

//! DMA-mapped buffers, and the copies into and out of them: a plain bulk copy
//! while a buffer is quiet, a volatile one otherwise (see the module
//! documentation of `verbs`).

use super::*;

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
pub(super) struct DmaBuf {
    pub(super) cpu: NonNull<u8>,
    pub(super) cap: usize,
    pub(super) len: u32,
    pub(super) dma: u64,
    pub(super) dev: NonNull<ffi::IbDevice>,
    pub(super) mr: Option<Mr>,
    pub(super) writers: AtomicU32,
    pub(super) remote_write: AtomicBool,
}

impl DmaBuf {
    /// # Safety
    ///
    /// `dev` must be a live device, and stay so while the buffer exists.
    pub(super) unsafe fn new(dev: NonNull<ffi::IbDevice>, len: u32) -> Result<Self> {
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
    /// buffer, which one thread at a time holds (a `Held`: process context
    /// under the connection's mutex, or a completion that took it): while a
    /// copy runs, no other thread can post. The copy's
    /// own thread can, from a closure between two chunks, so a copy in chunks
    /// asks again before each.
    pub(super) fn quiet(&self) -> bool {
        !self.remote_write.load(Ordering::Relaxed) && self.writers.load(Ordering::Acquire) == 0
    }

    /// Whether bytes `off..off + len` are in the buffer.
    pub(super) fn holds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len)
            .is_some_and(|end| end <= self.len as usize)
    }

    pub(super) fn sync(&self, for_cpu: bool) {
        // SAFETY: Mapped on the live `dev` by the type invariant.
        unsafe { ffi::cmecho_dma_sync(self.dev.as_ptr(), self.dma, self.len, for_cpu) };
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: Mapped as the type invariant says. The device no longer uses it:
        // either the QP is destroyed (`ResOwner::destroy`), or the buffer was never
        // in a slot, so no work request named it; its MR is deregistered above.
        unsafe { ffi::cmecho_dma_unmap(self.dev.as_ptr(), self.dma, self.len) };
        // SAFETY: The allocation is this buffer's own, by the type invariant.
        drop(unsafe { KVec::from_raw_parts(self.cpu.as_ptr(), self.len as usize, self.cap) });
    }
}

impl<C: Completion> ResPtr<C> {
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
}
