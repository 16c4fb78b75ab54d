// SPDX-License-Identifier: GPL-2.0

//! The module's workqueue: where the layer runs what must not run in a
//! callback (a connection's release, a listener's deferred stop), and where a
//! ULP may [`spawn`] its own work.

use super::ffi;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::workqueue::{impl_has_work, new_work, Queue, Work, WorkItem};

/// The module's workqueue, alive from [`WorkQueue::new`] to its drop.
///
/// Must be the first field the module initialises and the last it drops.
///
/// # Invariants
///
/// While a value exists, the module's workqueue exists; there is at most one.
pub(crate) struct WorkQueue(());

impl WorkQueue {
    /// Creates the module's workqueue; `EBUSY` while one exists.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: The helper refuses a second workqueue; it may sleep, and this
        // runs in process context (module init).
        to_result(unsafe { ffi::cmecho_wq_init() })?;
        // INVARIANT: The workqueue was created and belongs to this value.
        Ok(Self(()))
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this value owns the workqueue. Dropped at
        // module exit, after every other part of the module (configfs, endpoints,
        // connections) is gone; waits for queued items.
        unsafe { ffi::cmecho_wq_exit() };
    }
}

/// The module's workqueue, for work that must not run in the caller's context;
/// `None` while there is none (before [`WorkQueue::new`], after its drop).
///
/// Items queued on it finish before it is destroyed: the module drops its
/// [`WorkQueue`] last, when nothing can call this any more.
fn workqueue() -> Option<&'static Queue> {
    // SAFETY: Reads a pointer the helper sets at init and clears at exit.
    let wq = unsafe { ffi::cmecho_wq_get() };
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
