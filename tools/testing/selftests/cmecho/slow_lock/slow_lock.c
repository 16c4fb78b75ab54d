// SPDX-License-Identifier: GPL-2.0
/*
 * A test tool of cmecho's selftests: it widens the windows between cmecho's
 * critical sections, so that a race the tests cannot otherwise force happens
 * on every try. While loaded, each mutex that the code of module target= takes
 * (default cmecho), in a task whose name starts with comm=, waits delay_ms
 * before it is taken (a busy wait: the probe cannot sleep). hits counts them.
 * comm, delay_ms and hits may be rewritten while loaded (delay_ms=0 disarms):
 * a test loads the module once and arms it as often as it needs, so that the
 * probe on this hot function is registered once, not once per use.
 *
 *   insmod cmecho_slow_lock.ko comm=rdma delay_ms=300
 *
 * Nothing of cmecho itself changes: the same module runs as in production.
 */
#include <linux/delay.h>
#include <linux/kallsyms.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/stacktrace.h>
#include <linux/string.h>

static char target[MODULE_NAME_LEN] = "cmecho";
module_param_string(target, target, sizeof(target), 0444);
MODULE_PARM_DESC(target, "the module whose mutex_lock calls are slowed");

static char comm[TASK_COMM_LEN];
module_param_string(comm, comm, sizeof(comm), 0644);
MODULE_PARM_DESC(comm, "only tasks whose name starts with this are slowed");

static unsigned int delay_ms = 300;
module_param(delay_ms, uint, 0644);
MODULE_PARM_DESC(delay_ms, "busy wait before each slowed mutex_lock, at most 2000; 0 disarms");

static unsigned int hits;
module_param(hits, uint, 0644);
MODULE_PARM_DESC(hits, "mutex acquisitions slowed so far");

/* Frames looked at: the probe's own, ftrace's, the lock's, its callers'. */
#define SLOW_LOCK_FRAMES 12

/* Whether addr is code of the target module: "name+off/size [target]". */
static bool slow_lock_in_target(unsigned long addr)
{
	char sym[KSYM_SYMBOL_LEN];
	const char *mod;
	size_t len = strlen(target);

	if (addr < MODULES_VADDR || addr >= MODULES_END)
		return false;
	sprint_symbol(sym, addr);
	mod = strrchr(sym, '[');
	return mod && !strncmp(mod + 1, target, len) && mod[len + 1] == ']';
}

static bool slow_lock_from_target(struct pt_regs *regs)
{
	unsigned long entries[SLOW_LOCK_FRAMES];
	unsigned int i, n;

	/* At the probed function's first instruction, sp holds its return address. */
	if (slow_lock_in_target(*(unsigned long *)kernel_stack_pointer(regs)))
		return true;
	n = stack_trace_save(entries, SLOW_LOCK_FRAMES, 0);
	for (i = 0; i < n; i++)
		if (slow_lock_in_target(entries[i]))
			return true;
	return false;
}

static int slow_lock_pre(struct kprobe *p, struct pt_regs *regs)
{
	unsigned int ms = min(READ_ONCE(delay_ms), 2000U);
	size_t len = strnlen(comm, sizeof(comm));

	if (!ms || !len || strncmp(current->comm, comm, len))
		return 0;
	if (!slow_lock_from_target(regs))
		return 0;
	WRITE_ONCE(hits, READ_ONCE(hits) + 1);
	mdelay(ms);
	return 0;
}

static struct kprobe slow_lock_kp = {
	.symbol_name = "mutex_lock_nested",
	.pre_handler = slow_lock_pre,
};

static int __init slow_lock_init(void)
{
	int ret;

	if (!target[0] || delay_ms > 2000)
		return -EINVAL;
	ret = register_kprobe(&slow_lock_kp);
	if (ret)
		return ret;
	pr_info("cmecho_slow_lock: mutexes %s takes in %s wait %u ms\n", target, comm,
		delay_ms);
	return 0;
}

static void __exit slow_lock_exit(void)
{
	unregister_kprobe(&slow_lock_kp);
	pr_info("cmecho_slow_lock: %u acquisitions slowed\n", hits);
}

module_init(slow_lock_init);
module_exit(slow_lock_exit);
MODULE_DESCRIPTION("cmecho selftests: slow down one task's mutexes in one module");
MODULE_LICENSE("GPL");
