// SPDX-License-Identifier: GPL-2.0

//! The module's workqueue: where the layer runs what must not run in a
//! callback (a connection's release, a listener's deferred stop), and where a
//! ULP may [`spawn`] its own work.

use super::ffi;
use super::params::PollContext;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{new_spinlock, Arc, SpinLock};
use kernel::time::msecs_to_jiffies;
use kernel::workqueue::{
    impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, HasWork, Queue,
    Work, WorkItem,
};

/// The module's workqueue: null before [`WorkQueue::new`] and after its drop.
///
/// Each module that builds this layer (cmecho and the samples) has its own.
static WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The module's workqueue for busy-polled CQs (`verbs::objects::Poller`) of
/// [`PollContext::Workqueue`]: made with [`WQ`], set just after it and
/// cleared just after it.
static POLL_WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The same for [`PollContext::UnboundWorkqueue`] and [`PollContext::Softirq`].
static POLL_UNB_WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The module's workqueue for the completions a softirq CQ hands to process
/// context ([`enqueue_completion`]): made with [`WQ`], set and cleared with
/// the polling ones. Its own, not [`WQ`]: a release running on [`WQ`] waits
/// for these items (`flush_work`), and a work item must not wait for one
/// queued behind it on its own workqueue's rescuer.
static COMP_WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The module's workqueue, alive from [`WorkQueue::new`] to its drop.
///
/// Must be the first field the module initialises and the last it drops.
///
/// # Invariants
///
/// While a value exists, the module's workqueues exist and [`WQ`],
/// [`POLL_WQ`], [`POLL_UNB_WQ`] and [`COMP_WQ`] point to them; there is at
/// most one.
pub(crate) struct WorkQueue(());

impl WorkQueue {
    /// Creates the module's workqueue; `EBUSY` while one exists.
    pub(crate) fn new() -> Result<Self> {
        if !WQ.load(Ordering::Acquire).is_null() {
            return Err(EBUSY);
        }
        // High priority, as the CQs' completion work (`ib-comp-wq`): the
        // accepts and releases queued here must not wait behind the data path
        // of the connections already up, or a burst of connects is served only
        // once the traffic stops.
        // SAFETY: The name is a NUL-terminated string, which the workqueue copies.
        // Allocating may sleep, and this runs in process context (module init).
        let wq = unsafe {
            ffi::cmecho_wq_alloc(
                c"cmecho".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND
                    | bindings::wq_flags_WQ_HIGHPRI
                    | bindings::wq_flags_WQ_MEM_RECLAIM,
                0,
            )
        };
        if wq.is_null() {
            return Err(ENOMEM);
        }
        // Per CPU, as `ib-comp-wq`, where the core polls its CQs: a
        // busy-polled CQ's work runs on the CPU its completion came on.
        // CPU-intensive: a run that polls on keeps its CPU, and the
        // workqueue does not hold other items back for it. Not high
        // priority: a poller gives way to the tasks that make the next
        // completion (the provider's), as soon as one waits for the CPU.
        // SAFETY: As above.
        let poll_wq = unsafe {
            ffi::cmecho_wq_alloc(
                c"cmecho_poll".as_char_ptr(),
                bindings::wq_flags_WQ_PERCPU | bindings::wq_flags_WQ_CPU_INTENSIVE,
                0,
            )
        };
        // Unbound: a busy-polled CQ's work runs on any CPU the scheduler
        // picks, an idle one first, as `ib-comp-unb-wq`'s.
        // SAFETY: As above.
        let poll_unb_wq = unsafe {
            ffi::cmecho_wq_alloc(
                c"cmecho_poll_unb".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND,
                0,
            )
        };
        // Unbound and high priority, as the core's `ib-comp-unb-wq`; with a
        // rescuer, as the releases that wait for its items have one.
        // SAFETY: As above.
        let comp_wq = unsafe {
            ffi::cmecho_wq_alloc(
                c"cmecho_comp".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND
                    | bindings::wq_flags_WQ_HIGHPRI
                    | bindings::wq_flags_WQ_MEM_RECLAIM,
                0,
            )
        };
        let made = [comp_wq, poll_unb_wq, poll_wq, wq];
        if poll_wq.is_null() || poll_unb_wq.is_null() || comp_wq.is_null() {
            // SAFETY: Those allocated above are known to nothing else.
            unsafe { destroy_unused(made) };
            return Err(ENOMEM);
        }
        if WQ
            .compare_exchange(ptr::null_mut(), wq, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another `new` got there first: these were never used.
            // SAFETY: All were allocated above and nothing else knows them.
            unsafe { destroy_unused(made) };
            return Err(EBUSY);
        }
        POLL_WQ.store(poll_wq, Ordering::Release);
        POLL_UNB_WQ.store(poll_unb_wq, Ordering::Release);
        COMP_WQ.store(comp_wq, Ordering::Release);
        // INVARIANT: The workqueues were created, `WQ`, `POLL_WQ`,
        // `POLL_UNB_WQ` and `COMP_WQ` point to them, and they belong to this
        // value.
        Ok(Self(()))
    }
}

/// Destroys the workqueues of `qs` that were made (the non-null ones), in
/// order.
///
/// # Safety
///
/// Each non-null entry must be a live workqueue that nothing else knows.
unsafe fn destroy_unused(qs: [*mut bindings::workqueue_struct; 4]) {
    for q in qs.into_iter().filter(|q| !q.is_null()) {
        // SAFETY: Live, and known to nothing else, by the caller's guarantee.
        unsafe { bindings::destroy_workqueue(q) };
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        let comp_wq = COMP_WQ.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: By the type invariant `comp_wq` is a live workqueue this
        // value owns. Every connection is gone, and each waited for its
        // items on it when it was released. Destroyed before `WQ`: an item
        // may still queue a close there.
        unsafe { bindings::destroy_workqueue(comp_wq) };
        let wq = WQ.load(Ordering::Acquire);
        // SAFETY: By the type invariant `wq` is the live workqueue this value owns.
        // Dropped at module exit, after every other part of the module (configfs,
        // endpoints, connections) is gone; waits for queued items, which still find
        // the workqueue in `WQ` if they queue more.
        unsafe { bindings::destroy_workqueue(wq) };
        WQ.store(ptr::null_mut(), Ordering::Release);
        for q in [&POLL_WQ, &POLL_UNB_WQ] {
            let poll_wq = q.swap(ptr::null_mut(), Ordering::AcqRel);
            // SAFETY: By the type invariant `poll_wq` is a live workqueue this
            // value owns. Every connection, and so every busy-polled CQ and its
            // work, is gone, as is all the other work that could release one.
            unsafe { bindings::destroy_workqueue(poll_wq) };
        }
    }
}

/// The module's workqueue, for work that must not run in the caller's context;
/// `None` while there is none (before [`WorkQueue::new`], after its drop).
///
/// Items queued on it finish before it is destroyed: the module drops its
/// [`WorkQueue`] last, when nothing can call this any more.
fn workqueue() -> Option<&'static Queue> {
    let wq = WQ.load(Ordering::Acquire);
    if wq.is_null() {
        return None;
    }
    // SAFETY: A non-null pointer is the live module workqueue, which lives until
    // the module drops its `WorkQueue`, after everything that queues work.
    Some(unsafe { Queue::from_raw(wq) })
}

/// The module's workqueue for busy-polled CQs of poll context `poll`; `None`
/// while there is none (before [`WorkQueue::new`], after its drop). A CQ that
/// uses it is freed, its work disabled, before the module drops its
/// [`WorkQueue`].
pub(super) fn poll_queue(poll: PollContext) -> Option<NonNull<bindings::workqueue_struct>> {
    NonNull::new(
        match poll {
            PollContext::Workqueue => &POLL_WQ,
            PollContext::UnboundWorkqueue | PollContext::Softirq => &POLL_UNB_WQ,
        }
        .load(Ordering::Acquire),
    )
}

/// A closure that [`spawn`] runs once on the module's workqueue.
///
/// `Queue::try_spawn` does the same, but the lockdep class key of its work
/// items is one static of the kernel image, shared by every module that calls
/// it, while the class name is a string of each caller's module. A second
/// module that spawns (the cmtime sample next to cmecho), or this one loaded
/// again at another address, makes lockdep warn that the key has two names (a
/// `WARNING`: with `panic_on_warn`, a crash), and the class keeps pointing at
/// the name of a module that is gone. Here the key and the name both belong to
/// the module that builds this layer, and lockdep forgets them when it unloads.
#[pin_data]
struct Job<T> {
    #[pin]
    work: Work<Job<T>>,
    func: Option<T>,
}

impl_has_work! {
    impl{T} HasWork<Self> for Job<T> { self.work }
}

impl<T: FnOnce()> WorkItem for Job<T> {
    type Pointer = Pin<KBox<Self>>;

    fn run(mut this: Pin<KBox<Self>>) {
        if let Some(f) = this.as_mut().project().func.take() {
            f();
        }
    }
}

/// Runs `f` once on the module's workqueue, in process context.
///
/// `ENODEV` when the module has no workqueue (before [`WorkQueue::new`], after
/// its drop), `ENOMEM` when the work item cannot be allocated; `f` is then
/// dropped without running.
pub(crate) fn spawn<T: FnOnce() + Send + 'static>(f: T) -> Result {
    let q = workqueue().ok_or(ENODEV)?;
    let job = KBox::pin_init(
        pin_init!(Job {
            work <- new_work!("cmecho_job"),
            func: Some(f),
        }),
        GFP_KERNEL,
    )?;
    q.enqueue(job);
    Ok(())
}

/// Queues `item`'s work item `ID` on the module's workqueue for completions
/// handed to process context ([`COMP_WQ`]), as [`enqueue`] does on the
/// module's workqueue.
pub(super) fn enqueue_completion<T, const ID: u64>(item: Arc<T>) -> Result<(), Arc<T>>
where
    T: WorkItem<ID, Pointer = Arc<T>> + HasWork<T, ID> + Send + Sync + 'static,
{
    let wq = COMP_WQ.load(Ordering::Acquire);
    if wq.is_null() {
        return Err(item);
    }
    // SAFETY: A non-null pointer is the live workqueue, which lives until the
    // module drops its `WorkQueue`, after every connection that queues on it.
    unsafe { Queue::from_raw(wq) }.enqueue(item)
}

/// Queues `item`, whose work item is a field of its own (preallocated with it),
/// on the module's workqueue: nothing is allocated, so this cannot fail for
/// want of memory. Gives `item` back when it is queued already, or when the
/// module has no workqueue (before [`WorkQueue::new`], after its drop).
///
/// `ID` tells apart the work items of one type that has several.
pub(super) fn enqueue<T, const ID: u64>(item: Arc<T>) -> Result<(), Arc<T>>
where
    T: WorkItem<ID, Pointer = Arc<T>> + HasWork<T, ID> + Send + Sync + 'static,
{
    match workqueue() {
        Some(q) => q.enqueue(item),
        None => Err(item),
    }
}

/// What a [`Timer`] runs when it fires.
pub(crate) trait TimerHandler: Send + Sync + 'static {
    /// Runs once per [`Timer::arm`] that was not disarmed, on the module's
    /// workqueue, in process context; it may arm the timer again.
    fn fire(self: Arc<Self>);
}

/// A one-shot timer on the module's workqueue, for a deadline of a ULP's.
///
/// The timer holds its handler from [`Timer::arm`] until it fires or is
/// disarmed: an armed timer keeps what it will call alive, and a handler that
/// keeps its timer makes no cycle once the timer is disarmed. The owner must
/// disarm it ([`Timer::disarm_sync`]) before the module can unload: an armed
/// timer would queue its work on a workqueue that is gone.
///
/// # Invariants
///
/// While the work item is pending (queued with a delay) it holds one
/// reference on this timer, made by `Arc::into_raw` in `enqueue_delayed`.
/// `handler` is `Some` only from a successful enqueue until `run` or
/// [`Timer::disarm_sync`] takes it.
#[pin_data]
pub(crate) struct Timer<H: TimerHandler> {
    #[pin]
    work: DelayedWork<Timer<H>>,
    #[pin]
    handler: SpinLock<Option<Arc<H>>>,
}

impl_has_delayed_work! {
    impl{H: TimerHandler} HasDelayedWork<Self> for Timer<H> { self.work }
}

impl<H: TimerHandler> WorkItem for Timer<H> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let h = this.handler.lock().take();
        if let Some(h) = h {
            h.fire();
        }
    }
}

impl<H: TimerHandler> Timer<H> {
    /// A timer that is not armed.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                work <- new_delayed_work!("cmecho_timer"),
                handler <- new_spinlock!(None, "cmecho_timer_handler"),
            }),
            GFP_KERNEL,
        )
    }

    /// Arms the timer to call `h.fire()` in `ms` milliseconds. Does nothing and
    /// returns false when it is armed already, or when the module has no
    /// workqueue (being unloaded).
    ///
    /// Never sleeps: it may be called in a CM handler or under a spinlock.
    pub(crate) fn arm(self: &Arc<Self>, h: Arc<H>, ms: u32) -> bool {
        let Some(q) = workqueue() else {
            return false;
        };
        let mut g = self.handler.lock();
        if g.is_some() {
            return false;
        }
        match q.enqueue_delayed(self.clone(), msecs_to_jiffies(ms)) {
            Ok(()) => {
                // INVARIANT: The work item was enqueued, with the reference
                // `enqueue_delayed` made; `handler` is set under the same lock.
                *g = Some(h);
                true
            }
            // A `disarm_sync` is cancelling the work item, which refuses to be
            // queued meanwhile; `enqueue_delayed` gave the reference back.
            Err(_) => false,
        }
    }

    /// Disarms the timer and waits for a `fire` that already started. After it
    /// returns no `fire` runs until the next [`Timer::arm`]; the caller keeps
    /// arms from racing with it. May sleep; must not be called from the
    /// timer's own `fire`.
    pub(crate) fn disarm_sync(self: &Arc<Self>) {
        let work: *const DelayedWork<Self> = &self.work;
        // SAFETY: `work` points to the `DelayedWork` of this live timer; the
        // `work_struct` inside it is the `work` field of a `delayed_work`.
        let dwork = unsafe {
            kernel::container_of!(
                Work::raw_get(DelayedWork::raw_as_work(work)),
                bindings::delayed_work,
                work
            )
        };
        // SAFETY: `dwork` is the initialised `delayed_work` of this timer, which
        // lives at least as long as `self`. This runs in process context and,
        // as documented, not from the work item itself.
        let cancelled = unsafe { bindings::cancel_delayed_work_sync(dwork) };
        if cancelled {
            // SAFETY: By the type invariant a pending work item held one
            // reference on this timer, made by `Arc::into_raw` of a clone of an
            // `Arc` of this allocation; cancelled, it gives that reference back
            // and nothing else will use it.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(self)) });
        }
        // INVARIANT: The work item is neither pending nor running; the handler
        // of an arm that raced with the cancel goes too.
        let h = self.handler.lock().take();
        drop(h);
    }
}
