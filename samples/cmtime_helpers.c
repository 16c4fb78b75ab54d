// SPDX-License-Identifier: GPL-2.0
/*
 * C side of the cmtime sample: cmecho's own C helpers, compiled again into this
 * module from the same sources (nothing is copied), plus the string module
 * parameter Rust module parameters cannot express yet.
 */
#include <linux/moduleparam.h>

#include "../rust/helpers/cm.c"
#include "../rust/helpers/verbs.c"
#include "../rust/helpers/debugfs.c"
/* The layer's tracepoints, under this module's own trace system. */
#define CMECHO_TRACE_SYSTEM cmecho_cmtime
#include "../rust/helpers/trace.c"
#include "cmtime.h"

static char addr[64] = "10.77.0.1";
module_param_string(addr, addr, sizeof(addr), 0444);
MODULE_PARM_DESC(addr, "IPv4 or IPv6 address of an RDMA CM listener to connect to");

const char *cmtime_addr(void)
{
	return addr;
}
