// SPDX-License-Identifier: GPL-2.0

//! cmecho's safe layer over the RDMA connection manager.
//!
//! This module and `rust/helpers/*.c` are the only places in cmecho that hold `unsafe`.

use kernel::error::to_result;
use kernel::prelude::*;

mod ffi;

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
