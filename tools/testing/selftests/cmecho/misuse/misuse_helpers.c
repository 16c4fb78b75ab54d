// SPDX-License-Identifier: GPL-2.0
/*
 * C side of the misuse fixture (misuse.sh): cmecho's own C helpers, compiled again into this
 * module from the same sources, plus the string module parameter.
 */
#include <linux/moduleparam.h>

#include "../../../../../rust/helpers/cm.c"
#include "../../../../../rust/helpers/verbs.c"
#include "../../../../../rust/helpers/debugfs.c"
/* The layer's tracepoints, under this module's own trace system. */
#define CMECHO_TRACE_SYSTEM cmecho_misuse
#include "../../../../../rust/helpers/trace.c"
#include "misuse.h"

static char addr[64] = "10.77.0.1";
module_param_string(addr, addr, sizeof(addr), 0444);
MODULE_PARM_DESC(addr, "Local IPv4 or IPv6 address to listen on and connect to");

const char *misuse_addr(void)
{
	return addr;
}
