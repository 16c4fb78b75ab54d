// SPDX-License-Identifier: GPL-2.0

//! Which task runs which callback of this layer.
//!
//! The calls that wait for CM handlers or completions ([`Connector::connect`],
//! [`Conn::close_and_wait`]) must not run from a callback of this layer, nor
//! from a [`Conn::with_res`] closure: the wait could be for the very callback
//! that makes it, or for one that waits for it. This module records the tasks
//! running such code, as addresses compared only with `current`, so that those
//! calls can refuse them with `EDEADLK`.
//!
//! Why at run time, and not by a token of process context the blocking calls
//! would take: whether a call runs inside a callback is a property of the task,
//! not of the values it holds. A callback holds the same `Arc<Conn>` that
//! process context holds, and the kernel hands a module's own entry points
//! (its init, configfs, its work items) no token the layer could ask for; a
//! safe way to make one would be this same check. What the types can say,
//! they say: only a [`Connector`] connects, once (`build_fail/` of the
//! selftests shows the misuses that no longer compile).
//!
//! [`Connector`]: super::Connector
//! [`Connector::connect`]: super::Connector::connect
//! [`Conn::close_and_wait`]: super::Conn::close_and_wait
//! [`Conn::with_res`]: super::Conn::with_res

use core::sync::atomic::{AtomicUsize, Ordering};

/// The calling task, as an address for comparisons only.
pub(super) fn current_task() -> usize {
    kernel::task::Task::current_raw() as usize
}

/// How many tasks running a callback of this layer, or a [`Conn::with_res`]
/// closure, are tracked at once.
const SCOPE_SLOTS: usize = 128;

/// The low bit of a [`SCOPES`] entry: its task runs a [`Conn::with_res`]
/// closure (a task's address is aligned, so the bit is free).
pub(super) const WITH_RES: usize = 1;

/// The tasks running a callback of this layer (a CM event of any cmecho id, a
/// completion of any connection) or a [`Conn::with_res`] closure, as addresses
/// compared only with `current`: the calls that wait for CM handlers or
/// completions refuse them, and `with_res` refuses its own closures.
static SCOPES: [AtomicUsize; SCOPE_SLOTS] = [const { AtomicUsize::new(0) }; SCOPE_SLOTS];

/// The calling task in [`SCOPES`] while this lives.
///
/// Beyond [`SCOPE_SLOTS`] tasks at once a scope is not tracked; each
/// connection's and listener's own tasks still are (`handler_task`,
/// `cq_task`, `res_task`, `handler_tasks`).
pub(super) struct Scope(Option<usize>);

impl Scope {
    /// A callback's scope (`kind` 0) or a `with_res` closure's ([`WITH_RES`]).
    pub(super) fn enter(kind: usize) -> Self {
        let me = current_task() | kind;
        // A load first: a failed exchange would still take the cache line.
        let slot = SCOPES.iter().position(|t| {
            t.load(Ordering::Relaxed) == 0
                && t.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        });
        Self(slot)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            SCOPES[i].store(0, Ordering::Relaxed);
        }
    }
}

/// Whether the calling task runs a callback of this layer or a
/// [`Conn::with_res`] closure. Only the task itself stores its own address, so
/// relaxed loads see what it stored.
pub(super) fn in_callback() -> bool {
    let me = current_task();
    SCOPES
        .iter()
        .any(|t| t.load(Ordering::Relaxed) & !WITH_RES == me)
}

/// Whether the calling task runs a callback of this layer (a CM event or a
/// completion), whether or not in a [`Conn::with_res`] closure too.
pub(super) fn in_handler() -> bool {
    let me = current_task();
    SCOPES.iter().any(|t| t.load(Ordering::Relaxed) == me)
}

/// Whether the calling task runs a [`Conn::with_res`] closure.
pub(super) fn in_with_res() -> bool {
    let me = current_task() | WITH_RES;
    SCOPES.iter().any(|t| t.load(Ordering::Relaxed) == me)
}
