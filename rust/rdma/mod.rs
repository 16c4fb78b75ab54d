// SPDX-License-Identifier: GPL-2.0

//! cmecho's safe layer over the RDMA connection manager and verbs.
//!
//! This module and `rust/helpers/*.c` are the only places in cmecho that hold
//! `unsafe`. [`cm`] has the connection types and the ordering guarantee,
//! [`params`] the value types of the connection knobs, [`verbs`] the QP resources.

use kernel::error::to_result;
use kernel::prelude::*;
use kernel::workqueue::Queue;

pub(crate) mod cm;
mod ffi;
pub(crate) mod params;
pub(crate) mod verbs;

/// Checks that the RDMA CM works from this module.
///
/// Creates an RC CM id in the initial network namespace, sets its ack timeout to
/// `ack_timeout` and destroys it. Needs no RDMA device.
pub(crate) fn probe_cm(ack_timeout: u8) -> Result {
    // SAFETY: `cmecho_probe_cm_id` takes a plain integer, owns every object it
    // creates and destroys each before returning; it may sleep, and module init
    // runs in process context.
    to_result(unsafe { ffi::cmecho_probe_cm_id(ack_timeout) })
}

/// The module's workqueue, alive from [`WorkQueue::new`] to its drop.
///
/// Must be the first field the module initialises and the last it drops.
pub(crate) struct WorkQueue(());

impl WorkQueue {
    /// Creates the module's workqueue.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: Called once, at module init, before anything uses the workqueue.
        to_result(unsafe { ffi::cmecho_wq_init() })?;
        Ok(Self(()))
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        // SAFETY: Dropped once, at module exit, after every other part of the module
        // (configfs, endpoints, connections) is gone; waits for queued items.
        unsafe { ffi::cmecho_wq_exit() };
    }
}

/// The module's workqueue, for work that must not run in the caller's context.
///
/// It exists while the module's [`WorkQueue`] is alive: from before anything can
/// call this (it is initialised first) until everything that could has been torn
/// down (it is dropped last). Items queued on it finish before it is destroyed.
pub(crate) fn workqueue() -> &'static Queue {
    // SAFETY: The module's workqueue is live for as long as anyone can call this,
    // as documented above.
    unsafe { Queue::from_raw(ffi::cmecho_wq_get()) }
}
