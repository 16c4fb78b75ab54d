/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What bindgen reads to write rust/rdma/ffi_generated.rs (Kbuild): the helpers'
 * own header, and the kernel's RDMA headers (and <linux/inet.h> for address
 * parsing) for the exported functions, enums and plain structs the Rust layer
 * uses directly, and cmecho_trace.h for the tracepoints. Kbuild names each item it
 * takes; nothing else of these headers reaches Rust. No C file includes this.
 */
#include "cmecho_helpers.h"

#include <linux/inet.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "cmecho_trace.h"
