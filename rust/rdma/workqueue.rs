// SPDX-License-Identifier: GPL-2.0

//! The module's workqueue: where the layer runs what must not run in a
//! callback (a connection's release, a listener's deferred stop), and where a
//! ULP may [`spawn`] its own work.

use super::ffi;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::workqueue::{impl_has_work, new_work, Queue, Work, WorkItem};

/// The module's workqueue: null before [`WorkQueue::new`] and after its drop.
///
/// Each module that builds this layer (cmecho and the samples) has its own.
static WQ: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(ptr::null_mut());

/// The module's workqueue, alive from [`WorkQueue::new`] to its drop.
///
/// Must be the first field the module initialises and the last it drops.
///
/// # Invariants
///
/// While a value exists, the module's workqueue exists and [`WQ`] points to it;
/// there is at most one.
pub(crate) struct WorkQueue(());

impl WorkQueue {
    /// Creates the module's workqueue; `EBUSY` while one exists.
    pub(crate) fn new() -> Result<Self> {
        if !WQ.load(Ordering::Acquire).is_null() {
            return Err(EBUSY);
        }
        // SAFETY: The name is a NUL-terminated string, which the workqueue copies.
        // Allocating may sleep, and this runs in process context (module init).
        let wq = unsafe {
            ffi::cmecho_wq_alloc(
                c"cmecho".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND | bindings::wq_flags_WQ_MEM_RECLAIM,
                0,
            )
        };
        if wq.is_null() {
            return Err(ENOMEM);
        }
        if WQ
            .compare_exchange(ptr::null_mut(), wq, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another `new` got there first: this one was never used.
            // SAFETY: `wq` was allocated above and nothing else knows it.
            unsafe { bindings::destroy_workqueue(wq) };
            return Err(EBUSY);
        }
        // INVARIANT: The workqueue was created, `WQ` points to it, and it belongs
        // to this value.
        Ok(Self(()))
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        let wq = WQ.load(Ordering::Acquire);
        // SAFETY: By the type invariant `wq` is the live workqueue this value owns.
        // Dropped at module exit, after every other part of the module (configfs,
        // endpoints, connections) is gone; waits for queued items, which still find
        // the workqueue in `WQ` if they queue more.
        unsafe { bindings::destroy_workqueue(wq) };
        WQ.store(ptr::null_mut(), Ordering::Release);
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
