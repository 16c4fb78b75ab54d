// SPDX-License-Identifier: GPL-2.0
/*
 * The negative control of cmecho's test harness: loaded with fault=<case>, this
 * module does one thing each detector of the debug test kernel exists to catch,
 * so that `scripts/check --canary` can show that the count fails and names it.
 * Never loaded by the selftests themselves.
 *
 *   fault=warn     a WARN()
 *   fault=leak     a kmalloc() whose pointer is dropped (kmemleak, after unload)
 *   fault=lockdep  two mutexes taken in both orders (lockdep: circular dependency)
 *   fault=hang     module init waits forever in D state (hung-task panic)
 *   fault=panic    panic()
 */
#include <linux/completion.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/string.h>

static char fault[16];
module_param_string(fault, fault, sizeof(fault), 0444);
MODULE_PARM_DESC(fault, "warn, leak, lockdep, hang or panic");

static DEFINE_MUTEX(canary_a);
static DEFINE_MUTEX(canary_b);
static DECLARE_COMPLETION(canary_never);

static int __init cmecho_canary_init(void)
{
	pr_info("cmecho_canary: fault=%s\n", fault);
	if (!strcmp(fault, "warn")) {
		WARN(1, "cmecho_canary: deliberate warning\n");
	} else if (!strcmp(fault, "leak")) {
		void *volatile p = kmalloc(256, GFP_KERNEL);

		if (!p)
			return -ENOMEM;
		memset(p, 0xca, 256);
		p = NULL;
	} else if (!strcmp(fault, "lockdep")) {
		mutex_lock(&canary_a);
		mutex_lock(&canary_b);
		mutex_unlock(&canary_b);
		mutex_unlock(&canary_a);
		mutex_lock(&canary_b);
		mutex_lock(&canary_a);
		mutex_unlock(&canary_a);
		mutex_unlock(&canary_b);
	} else if (!strcmp(fault, "hang")) {
		wait_for_completion(&canary_never);
	} else if (!strcmp(fault, "panic")) {
		panic("cmecho_canary: deliberate panic\n");
	} else {
		pr_err("cmecho_canary: unknown fault '%s'\n", fault);
		return -EINVAL;
	}
	return 0;
}

static void __exit cmecho_canary_exit(void)
{
}

module_init(cmecho_canary_init);
module_exit(cmecho_canary_exit);
MODULE_DESCRIPTION("cmecho test harness canary: triggers one debug detector");
MODULE_LICENSE("GPL");
