// SPDX-License-Identifier: GPL-2.0

//! cmecho's tracepoints: safe functions that emit the events of
//! `rust/helpers/cmecho_trace.h` (defined by `rust/helpers/trace.c`).
//!
//! Each function tests its tracepoint's static key here, inline, as the
//! kernel's `declare_trace!` does for the kernel's own tracepoints (which it
//! finds in `kernel::bindings`, where a module's cannot be): while the event is
//! off, a call is one jump patched out of the code, and `rust_do_trace_*` is
//! not called. Only once a tracer enabled it does that function run the
//! probes, which copy what they keep (the strings included) into the event.
//! What the caller computes for the arguments it computes either way.
//!
//! C header: [`include/linux/tracepoint.h`](srctree/include/linux/tracepoint.h)

use super::ffi;
use kernel::prelude::*;

/// Defines a safe function that emits one tracepoint of `trace.c`: it tests
/// the tracepoint's static key, `ffi::$tp`, inline, and only when it is on
/// calls `ffi::$emit` with the arguments (a `&CStr` passed as its pointer).
/// Without `CONFIG_TRACEPOINTS` the kernel has no tracepoints, bindgen declares
/// neither, and the function does nothing.
macro_rules! tracepoint {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $tp:ident, $emit:ident;) => {
        $(#[$m])*
        #[inline(always)]
        pub(crate) fn $name($($arg: $ty),*) {
            #[cfg(CONFIG_TRACEPOINTS)]
            {
                // SAFETY: `ffi::$tp` is a `struct tracepoint` that `trace.c`
                // defines in this module, so its `key` is a real static key
                // defined by C.
                let on = unsafe {
                    kernel::jump_label::static_branch_unlikely!(
                        ffi::$tp,
                        kernel::bindings::tracepoint,
                        key
                    )
                };
                if on {
                    // SAFETY: The tracepoint is this module's (`trace.c`). Its
                    // strings are NUL-terminated and valid for the call, whose
                    // probes copy them into the event. RCU is watching: the
                    // callers run in process context (a CM event's handler, a
                    // connecting task, a work item of the module's or of a
                    // CQ's workqueue).
                    unsafe { ffi::$emit($(Arg::pass($arg)),*) }
                }
            }
            #[cfg(not(CONFIG_TRACEPOINTS))]
            {
                $(let _ = $arg;)*
            }
        }
    };
}

/// How an argument reaches C: a string as its pointer, a number as it is.
trait Arg {
    type C;
    fn pass(self) -> Self::C;
}

impl Arg for &CStr {
    type C = *const kernel::ffi::c_char;
    fn pass(self) -> Self::C {
        self.as_char_ptr()
    }
}

macro_rules! arg_as_is {
    ($($t:ty),*) => {
        $(impl Arg for $t {
            type C = $t;
            fn pass(self) -> $t {
                self
            }
        })*
    };
}
arg_as_is!(u8, u32, u64, i32);

tracepoint! {
    /// A connection of `endpoint` numbered `conn` went from state `from` to `to`
    /// on `input` (with a CM event's `status`, else 0).
    fn conn_state(
        endpoint: &CStr,
        conn: u32,
        from: &CStr,
        to: &CStr,
        input: &CStr,
        status: i32,
    ) => __tracepoint_cmecho_conn_state, rust_do_trace_cmecho_conn_state;
}

tracepoint! {
    /// A setup step `step` of connection `conn` of `endpoint` ended after
    /// `duration_us`, with `err` (0 or a negative errno).
    fn cm_step(endpoint: &CStr, conn: u32, step: &CStr, duration_us: u64, err: i32)
        => __tracepoint_cmecho_cm_step, rust_do_trace_cmecho_cm_step;
}

tracepoint! {
    /// A native echo client of `endpoint` detected on connection `conn` that its
    /// peer failed: a completion with `wc_status`, `detect_us` after the last
    /// good one, on a QP with `ack_timeout` and `retry_count`.
    fn detect(
        endpoint: &CStr,
        conn: u32,
        ack_timeout: u8,
        retry_count: u8,
        detect_us: u64,
        wc_status: u32,
    ) => __tracepoint_cmecho_detect, rust_do_trace_cmecho_detect;
}

tracepoint! {
    /// Connection `conn` of `endpoint` was released; each part's time in µs
    /// (see `cmecho_trace.h`).
    fn release(
        endpoint: &CStr,
        conn: u32,
        disconnect_us: u64,
        destroy_qp_us: u64,
        free_us: u64,
        destroy_id_us: u64,
    ) => __tracepoint_cmecho_release, rust_do_trace_cmecho_release;
}

tracepoint! {
    /// An echo of `size` bytes came back on connection `conn` of `endpoint`
    /// after `rtt_ns`.
    fn echo_rtt(endpoint: &CStr, conn: u32, size: u32, rtt_ns: u64)
        => __tracepoint_cmecho_echo_rtt, rust_do_trace_cmecho_echo_rtt;
}
