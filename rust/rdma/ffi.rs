// SPDX-License-Identifier: GPL-2.0

//! Declarations of cmecho's own C helpers (`rust/helpers/*.c`).
//!
//! Only functions of this module's C files are declared here, and each matches its
//! prototype in `rust/helpers/cmecho_helpers.h`. Foreign structs are never described
//! here: they stay opaque pointers.

use kernel::ffi::c_int;

extern "C" {
    /// Creates an RC CM id in the initial netns, sets its ack timeout, destroys it.
    pub(crate) fn cmecho_probe_cm_id(ack_timeout: u8) -> c_int;
}
