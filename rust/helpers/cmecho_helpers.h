/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of cmecho: functions the Rust side calls for RDMA CM and verbs entry
 * points that are macros or static inlines in C. Every function here is declared
 * once, in this header, and once, by hand, in rust/rdma/ffi.rs.
 */
#ifndef CMECHO_HELPERS_H
#define CMECHO_HELPERS_H

#include <linux/types.h>

int cmecho_probe_cm_id(u8 ack_timeout);

#endif /* CMECHO_HELPERS_H */
