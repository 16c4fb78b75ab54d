// SPDX-License-Identifier: GPL-2.0
/*
 * Defines cmecho's tracepoints (cmecho_trace.h), and for each the function
 * Rust calls once it has seen the tracepoint enabled (rust/rdma/trace.rs).
 */
#define CREATE_TRACE_POINTS
#define CREATE_RUST_TRACE_POINTS
#include "cmecho_trace.h"
