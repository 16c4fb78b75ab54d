// SPDX-License-Identifier: GPL-2.0

//! The verbs a connection needs: PD, CQ, RC QP, DMA-mapped buffers, fast-registration
//! MRs, SEND/RECV and RDMA READ/WRITE, and read-back of the QP's attributes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A [`ResOwner`] owns them all, boxed as a [`ResPtr`]. Each kernel object has
//! a type here that frees it on drop ([`Pd`], [`Cq`], [`Mr`], [`DmaBuf`]); the
//! QP lives in the CM id, and
//! [`ResOwner::destroy`] destroys it before anything else goes, then drops the
//! rest in the order CQ, MRs and buffers, PD, and last the [`Cqe`]s the work
//! requests pointed to. Every index, tag and length a caller passes is
//! checked here before C sees it; `rust/helpers/verbs.c` only reaches what Rust
//! cannot (macros, static inlines, fields of structs without a Rust layout), and
//! fills in the work requests: their opcode, flags and access rights, the CQ's
//! poll context and the id's port space and QP type are chosen here, in Rust.
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

mod buf;
mod objects;
mod post;

use super::cq::{Completion, Cqe};
use super::ffi;
use super::id::IdPtr;
use super::params::PollContext;
use buf::DmaBuf;
use core::cell::OnceCell;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use kernel::alloc::flags::GFP_KERNEL;
use kernel::error::to_result;
use kernel::page::PAGE_SIZE;
use objects::{Cq, Mr, Pd};

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::time::{Delta, Instant, Monotonic};

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

/// The bytes of an `enum ib_mtu` (`ib_mtu_enum_to_int`, a static inline): 256
/// for `IB_MTU_256` doubling up to 4096; 0 for a value the kernel does not define.
fn mtu_bytes(mtu: ffi::ib_mtu) -> u32 {
    match mtu {
        ffi::IB_MTU_256..=ffi::IB_MTU_4096 => 256 << (mtu - ffi::IB_MTU_256),
        _ => 0,
    }
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

/// What a [`ResPtr`] frees after its QP, in field order: the CQ, buffers and
/// their MRs, the PD, then the [`Cqe`]s (the last tag's is the registrations')
/// and the writer [`Cqe`]s (one per tag, for receives and RDMA READs).
///
/// # Invariants
///
/// The fields are declared in the order they must be freed: the CQ first, since
/// freeing it waits for its completion work, after which no completion
/// callback runs (and so none reaches a buffer's count of requests in flight
/// or a `Cqe`). The buffers and MRs are of the device and PD of `pd`. `bufs`,
/// `cqes` and `wcqes` are never resized once built, so the addresses work
/// requests hold stay valid (and those of the buffers' `writers` counts); each
/// slot of `bufs` is set at most once.
struct Parts {
    #[expect(dead_code, reason = "held for its drop")]
    cq: Cq,
    bufs: KVec<OnceCell<DmaBuf>>,
    pd: Pd,
    cqes: KVec<Cqe>,
    wcqes: KVec<Cqe>,
}

/// How long each part of [`ResOwner::destroy`] took, in µs.
#[derive(Clone, Copy, Default)]
pub(crate) struct DestroyTimes {
    /// `rdma_destroy_qp`.
    pub(crate) destroy_qp_us: u64,
    /// The CQ (`ib_free_cq` waits for its completion work), the buffers and
    /// their MRs, the PD.
    pub(crate) free_us: u64,
}

/// The QP resources of one connection, as their holder sees them: only
/// through a [`Held`], by one thread at a time.
///
/// They are made by [`ResOwner::create`], in a box of their own that the
/// owner frees in [`ResOwner::destroy`], and reached by the owner
/// ([`ResOwner::hold`], in process context) and by their completions
/// ([`ResRef::try_hold`], wherever the CQ runs them: a work item or the CQ's
/// softirq). Who holds them is `hold`: a thread sets it from [`FREE`] to
/// [`HELD`] to hold them, and back when its [`Held`] goes; [`DEAD`] once
/// `destroy` has begun, for good.
///
/// # Invariants
///
/// `id` is the CM id the resources were created on; `dev` its device. `qp` is the
/// id's QP, created on `parts.pd` with `parts.cq` for both queues, and live
/// while `hold` is not [`DEAD`]; `lkey` is the PD's local DMA lkey. `ctx` is a
/// reference on an `Arc<C>` taken by [`ResOwner::create`], the context of
/// every `Cqe` in `parts.cqes`, of which there are `ntags + 1`, the last for
/// [`TAG_REG`], and of every `Cqe` in `parts.wcqes`, one writer `Cqe` per tag;
/// every `Cqe` names these resources as theirs; `parts.bufs` has the `nbufs`
/// slots of the configuration. A shared reference to them outside this
/// module's construction and destruction exists only inside a [`Held`]: so
/// one thread at a time posts, copies and fills a slot ([`DmaBuf::quiet`]
/// relies on it). It is not `Sync`, so a [`Held`] stays on its thread (the
/// raw pointers already make it so, the marker says it).
pub(crate) struct ResPtr<C: Completion> {
    id: NonNull<ffi::RdmaCmId>,
    qp: NonNull<ffi::IbQp>,
    dev: NonNull<ffi::IbDevice>,
    lkey: u32,
    ntags: u32,
    parts: ManuallyDrop<Parts>,
    ctx: *const C,
    hold: AtomicU8,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

/// [`ResPtr::hold`]: nobody holds the resources.
const FREE: u8 = 0;
/// [`ResPtr::hold`]: a [`Held`] holds them.
const HELD: u8 = 1;
/// [`ResPtr::hold`]: [`ResOwner::destroy`] has begun; nobody holds them again.
const DEAD: u8 = 2;

/// Sets `hold` from [`FREE`] to `to`, waiting while another thread holds the
/// resources: process context only, whose holders are completions that post
/// and return.
fn take_waiting(hold: &AtomicU8, to: u8) {
    while hold
        .compare_exchange(FREE, to, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        kernel::processor::cpu_relax();
    }
}

/// The owner of one connection's QP resources: what the connection keeps
/// under its `res` lock, and what alone can destroy them.
///
/// Dropping one without [`ResOwner::destroy`] leaks it: its QP must be
/// destroyed, and its CQ's completion work stopped, before anything under
/// them is freed, and only `destroy` can.
///
/// # Invariants
///
/// `self.0` points to the resources [`ResOwner::create`] boxed, live (and
/// their QP live, `hold` not [`DEAD`]) until `destroy` consumes the owner.
pub(crate) struct ResOwner<C: Completion>(NonNull<ResPtr<C>>);

// SAFETY: The kernel objects may be used and freed from any thread, and the
// context is an `Arc<C>` with `C: Send + Sync`, which may be dropped on any.
// The owner reaches the resources only through a `Held` of the thread that
// holds them.
unsafe impl<C: Completion> Send for ResOwner<C> {}

/// The resources as a completion of theirs reaches them: [`ResRef::try_hold`]
/// is all it can do.
///
/// # Invariants
///
/// `self.0` points to live resources whose CQ runs the completion this was
/// made for, for `'a`: freeing the CQ waits for its completion callbacks, and
/// [`ResOwner::destroy`] frees it before the resources go.
pub(crate) struct ResRef<'a, C: Completion>(NonNull<ResPtr<C>>, PhantomData<&'a ResPtr<C>>);

impl<'a, C: Completion> ResRef<'a, C> {
    /// # Safety
    ///
    /// `p` must be the address [`Cqe::res`] holds of a `Cqe` whose completion
    /// callback runs for `'a`.
    ///
    /// [`Cqe::res`]: super::cq::Cqe
    pub(super) unsafe fn from_raw(p: *const core::ffi::c_void) -> Option<Self> {
        // INVARIANT: By the caller's guarantee; a `Cqe`'s `res` is set before
        // any request carries it.
        NonNull::new(p.cast::<ResPtr<C>>().cast_mut()).map(|p| Self(p, PhantomData))
    }

    /// The resources held, unless another thread holds them (a process
    /// context's [`Conn::with_res`], the owner destroying them): `None` then,
    /// at once. Never spins: it runs where the holder may be the task this
    /// CPU interrupted.
    ///
    /// [`Conn::with_res`]: super::Conn::with_res
    pub(crate) fn try_hold(&self) -> Option<Held<'a, C>> {
        // SAFETY: Live for `'a` by the type invariant.
        let hold = unsafe { ResPtr::hold_word(self.0) };
        hold.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // INVARIANT: Set from `FREE` to `HELD` by this thread.
        // SAFETY: Live for `'a`, and held by this thread: no other thread
        // posts, copies or fills a slot until the `Held` goes.
        Some(Held(unsafe { &*self.0.as_ptr() }))
    }
}

/// Bottom halves off on this CPU while this lives (`local_bh_disable`):
/// what runs meanwhile is not preempted, and no softirq runs on this CPU.
/// Nothing that sleeps may run meanwhile.
///
/// # Invariants
///
/// Made only by [`BhOff::new`], which turned bottom halves off on the CPU
/// it runs on; not `Send`, so dropped there, once.
pub(in crate::rdma) struct BhOff(PhantomData<*mut ()>);

impl BhOff {
    /// Turns bottom halves off; they nest.
    pub(crate) fn new() -> Self {
        // SAFETY: Allowed in any context but hard interrupts, where no
        // completion runs; undone once, by the drop, on this CPU (the value
        // is not `Send`).
        unsafe { ffi::cmecho_bh_disable() };
        // INVARIANT: Bottom halves were turned off just above, on this CPU.
        Self(PhantomData)
    }
}

impl Drop for BhOff {
    fn drop(&mut self) {
        // SAFETY: Pairs with the `cmecho_bh_disable` of `new`, on its CPU
        // (type invariant).
        unsafe { ffi::cmecho_bh_enable() };
    }
}

/// The resources, held by the calling thread until this goes: it alone posts
/// and copies meanwhile.
///
/// # Invariants
///
/// This thread set `self.0.hold` from [`FREE`] to [`HELD`], and nothing else
/// changes it until the drop sets it back.
pub(crate) struct Held<'a, C: Completion>(&'a ResPtr<C>);

impl<C: Completion> core::ops::Deref for Held<'_, C> {
    type Target = ResPtr<C>;

    fn deref(&self) -> &ResPtr<C> {
        self.0
    }
}

impl<C: Completion> Drop for Held<'_, C> {
    fn drop(&mut self) {
        // Release: what this thread posted and copied is seen by the next holder.
        self.0.hold.store(FREE, Ordering::Release);
    }
}

impl<C: Completion> ResOwner<C> {
    /// Creates PD, CQ and QP on `id`; completions go to `ctx`'s [`Completion`],
    /// from a CQ polled where `poll` says (the core's workqueue, per CPU or
    /// unbound, or its softirq), or, with `busy_poll`, by this layer's own
    /// work item on the module's polling workqueue, which polls on for that
    /// long after a completion before it sleeps.
    ///
    /// Fails with `ENODEV` while `id` has no device (its address is not resolved).
    pub(super) fn create(
        id: &IdPtr,
        ctx: Arc<C>,
        cfg: &QpConfig,
        poll: PollContext,
        busy_poll: Option<Delta>,
    ) -> Result<Self> {
        // The box first: once built, the resources can only be destroyed.
        let slot = KBox::<ResPtr<C>>::new_uninit(GFP_KERNEL)?;
        let ctx = Arc::into_raw(ctx);
        // SAFETY: `ctx` is a reference on an `Arc<C>`, given to `build`.
        let res = match unsafe { ResPtr::build(id, ctx, cfg, poll, busy_poll) } {
            Ok(res) => res,
            Err(e) => {
                // SAFETY: `ctx` came from `Arc::into_raw` above, and `build`
                // kept no copy of it when it failed.
                drop(unsafe { Arc::from_raw(ctx) });
                return Err(e);
            }
        };
        let nn = NonNull::from(KBox::leak(slot.write(res)));
        let p = nn.as_ptr();
        // SAFETY: Just boxed: nothing else reaches it yet.
        let parts: &mut Parts = unsafe { &mut (*p).parts };
        // No request carries a `Cqe` yet: each learns where its resources
        // are before the first does.
        for c in Iterator::chain(parts.cqes.iter_mut(), parts.wcqes.iter_mut()) {
            c.set_res(p.cast_const().cast());
        }
        // INVARIANT: Boxed, with a live QP, `hold` `FREE`.
        Ok(Self(nn))
    }

    /// The resources, held by the calling thread, which waits while a
    /// completion of theirs holds them (that completion posts and returns).
    /// Process context; the caller serializes its calls (the connection's
    /// `res` lock), so the wait is for completions only.
    pub(crate) fn hold(&self) -> Held<'_, C> {
        // SAFETY: Live while the owner is (type invariant).
        let hold = unsafe { ResPtr::hold_word(self.0) };
        // Not `DEAD`: only `destroy` sets it, which consumes the owner.
        take_waiting(hold, HELD);
        // INVARIANT: Set from `FREE` to `HELD` by this thread.
        // SAFETY: Live, and held by this thread.
        Held(unsafe { &*self.0.as_ptr() })
    }

    /// Destroys the QP, frees the CQ and then everything else, and drops the
    /// context reference; returns how long each part took. See
    /// [`ResPtr::destroy_in_place`].
    ///
    /// # Safety
    ///
    /// The CM id the resources were created on must still be live, and the caller
    /// must not be one of these resources' own completion callbacks (freeing the
    /// CQ waits for them).
    pub(super) unsafe fn destroy(self) -> DestroyTimes {
        let p = self.0.as_ptr();
        // SAFETY: Live by the type invariant.
        let hold = unsafe { ResPtr::hold_word(self.0) };
        // Waits for a completion that holds the resources, then marks them
        // dead: no completion holds them again, so none posts on the QP
        // destroyed below.
        take_waiting(hold, DEAD);
        // SAFETY: The id is live and the caller no completion, by the
        // caller's guarantee; `hold` is `DEAD`, so no `Held` exists or will.
        let t = unsafe { ResPtr::destroy_in_place(p) };
        // SAFETY: `p` came from `KBox::leak` in `create`; the owner is
        // consumed, the CQ freed, so nothing else reaches the box any more.
        // Its fields were dropped above but for the plain ones (`parts` is a
        // `ManuallyDrop`, `ctx` a raw pointer), and dropping `ResPtr` drops
        // none of them again.
        drop(unsafe { KBox::from_raw(p) });
        t
    }
}

impl<C: Completion> ResPtr<C> {
    /// The holder word of the resources at `p`, borrowed alone, before they
    /// are held (a shared reference to the rest would not be one thread's).
    ///
    /// # Safety
    ///
    /// `p` must point to live resources for `'a`.
    unsafe fn hold_word<'a>(p: NonNull<Self>) -> &'a AtomicU8 {
        // SAFETY: Live for `'a` by the caller's guarantee; only the atomic
        // field is borrowed.
        unsafe { &*core::ptr::addr_of!((*p.as_ptr()).hold) }
    }

    /// # Safety
    ///
    /// `ctx` must be a reference on an `Arc<C>`. On success the result owns it;
    /// on failure it is not used.
    unsafe fn build(
        id: &IdPtr,
        ctx: *const C,
        cfg: &QpConfig,
        poll: PollContext,
        busy_poll: Option<Delta>,
    ) -> Result<Self> {
        let idp = id.as_ptr();
        let idn = NonNull::new(idp).ok_or(EINVAL)?;
        // SAFETY: `id` is live by its type invariant; its device is set once the
        // address is resolved (or the request arrived), before any QP.
        let dev = NonNull::new(unsafe { (*idp).device }).ok_or(ENODEV)?;
        let nr_cqe = cfg
            .max_send_wr
            .checked_add(cfg.max_recv_wr)
            .and_then(|n| n.checked_add(2))
            .ok_or(EINVAL)?;
        // One more in each queue, and two more CQEs, than the configuration
        // asks for: the slots the drain work requests once took, kept as a
        // margin (the ULPs' depths were sized with them).
        let (send_wr, recv_wr) = (cfg.max_send_wr + 1, cfg.max_recv_wr + 1);
        let ncqes = (cfg.ntags as usize).checked_add(1).ok_or(EINVAL)?;
        let mut cqes = KVec::with_capacity(ncqes, GFP_KERNEL)?;
        for tag in 0..cfg.ntags {
            // SAFETY: `ctx` is kept, as the invariant says, until `destroy` has
            // destroyed the QP and freed the CQ.
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
        let cq = unsafe { Cq::alloc(dev, nr_cqe, poll, busy_poll)? };
        // No event handler, SRQ or XRC domain; one SGE per work request.
        let mut init = ffi::ib_qp_init_attr {
            qp_type: ffi::IB_QPT_RC,
            sq_sig_type: ffi::IB_SIGNAL_REQ_WR,
            send_cq: cq.as_ptr(),
            recv_cq: cq.as_ptr(),
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
        let qp = NonNull::new(unsafe { (*idp).qp }).ok_or(EINVAL)?;
        // SAFETY: `pd` is live; its DMA lkey is set when it is allocated.
        let lkey = unsafe { (*pd.0.as_ptr()).local_dma_lkey };
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
            hold: AtomicU8::new(FREE),
            _not_sync: PhantomData,
        })
    }

    /// Destroys the QP, frees the CQ and then everything else, and drops the
    /// context reference; returns how long each part took.
    ///
    /// The QP is not drained first. Destroying it ends the device's use of it:
    /// of every buffer and MR, and of the requests still posted, which leave
    /// the consumer's scope (their completions may be in the CQ or not). Freeing
    /// the CQ next cancels its completion work and waits for a run under way;
    /// after that no completion callback runs, and completions still queued go
    /// with the CQ. Only then go the buffers (whose counts the callbacks
    /// update), the MRs, the PD and the `Cqe`s. A drain would only make the
    /// release wait for two more completions to travel through the CQ's
    /// workqueue (`ib_drain_qp`), most of what a release cost.
    ///
    /// # Safety
    ///
    /// `p` must point to resources whose `hold` is [`DEAD`], and nothing but
    /// their completion callbacks may reach them meanwhile. The CM id they
    /// were created on must still be live, and the caller must not be one of
    /// their own completion callbacks (freeing the CQ waits for them). Their
    /// fields but the plain ones are dropped: nothing may use them after.
    unsafe fn destroy_in_place(p: *mut Self) -> DestroyTimes {
        let t0 = Instant::<Monotonic>::now();
        // SAFETY: `p` is live and its QP too (`DEAD` is set only just before
        // this), its id by the caller's guarantee. Once it returns the device
        // uses neither the QP nor what its requests named, and adds no
        // completion of its to the CQ.
        unsafe { ffi::rdma_destroy_qp((*p).id.as_ptr()) };
        let t1 = Instant::<Monotonic>::now();
        // SAFETY: Dropped once, here, in field order: first the CQ, which no
        // QP uses any more and whose drop (`ib_free_cq`) waits for a
        // completion callback under way and runs none after; then what the
        // callbacks reached. A callback under way meanwhile reads its `Cqe`
        // (in the `cqes` allocation, not in `Parts`) and `hold`, which is
        // `DEAD`: it holds nothing.
        unsafe { ManuallyDrop::drop(&mut (*p).parts) };
        // SAFETY: By the type invariant `ctx` is the reference `create` took on an
        // `Arc<C>`, and no `Cqe` uses it any more.
        drop(unsafe { Arc::from_raw((*p).ctx) });
        DestroyTimes {
            destroy_qp_us: crate::rdma::micros(t1 - t0),
            free_us: crate::rdma::micros(t1.elapsed()),
        }
    }

    /// The QP's number, set when it was created: no call into the provider.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: The QP is live by the type invariant.
        unsafe { ffi::cmecho_qp_num(self.qp.as_ptr()) }
    }

    /// What the provider reports for the QP (`ib_query_qp`), which may sleep.
    pub(crate) fn query_qp(&self) -> Result<QpAttrs> {
        let mut attr: ffi::ib_qp_attr = Zeroable::zeroed();
        let mut init: ffi::ib_qp_init_attr = Zeroable::zeroed();
        let mask = ffi::IB_QP_STATE
            | ffi::IB_QP_TIMEOUT
            | ffi::IB_QP_RETRY_CNT
            | ffi::IB_QP_RNR_RETRY
            | ffi::IB_QP_MIN_RNR_TIMER
            | ffi::IB_QP_PATH_MTU;
        // SAFETY: The QP is live by the type invariant; `attr` and `init` are
        // writable, and the provider fills in no more than their layouts.
        to_result(unsafe {
            ffi::ib_query_qp(self.qp.as_ptr(), &mut attr, mask as c_int, &mut init)
        })?;
        Ok(QpAttrs {
            qp_num: self.qp_num(),
            state: u8::try_from(attr.qp_state).unwrap_or(u8::MAX),
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
            path_mtu: mtu_bytes(attr.path_mtu),
        })
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
        // The device writes the buffer (a receive, an RDMA READ); the peer
        // gets one remote right, the one the ULP asked for: read (an rping
        // source) or write (an rping sink), never both.
        let access = ffi::IB_ACCESS_LOCAL_WRITE
            | if remote_write {
                ffi::IB_ACCESS_REMOTE_WRITE
            } else {
                ffi::IB_ACCESS_REMOTE_READ
            };
        let mut rkey = 0u32;
        let mut addr = 0u64;
        // SAFETY: QP, MR and buffer are live by the type invariants; the MR was
        // allocated for this buffer's pages; `reg` lives until the CQ is freed.
        to_result(unsafe {
            ffi::cmecho_post_reg(
                self.qp.as_ptr(),
                mr.0.as_ptr(),
                b.dma,
                b.len,
                access,
                reg,
                &mut rkey,
                &mut addr,
            )
        })?;
        Ok((rkey, addr))
    }
}
