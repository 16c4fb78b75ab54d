// SPDX-License-Identifier: GPL-2.0
/*
 * A test tool of cmecho's selftests: it widens the windows between cmecho's
 * critical sections, so that a race the tests cannot otherwise force happens
 * on every try. While loaded, each mutex that the code of module target= takes
 * (default cmecho), in a task whose name starts with comm=, waits delay_ms
 * before it is taken (a busy wait: the probe cannot sleep). hits counts them.
 * comm, delay_ms and hits may be rewritten while loaded (delay_ms=0 disarms,
 * and ends the waits under way):
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
#include <linux/rcupdate.h>
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
MODULE_PARM_DESC(delay_ms, "busy wait before each slowed mutex_lock, at most 5000; 0 disarms");

static unsigned int hits;
module_param(hits, uint, 0644);
MODULE_PARM_DESC(hits, "mutex acquisitions slowed so far");

/*
 * The longest wait: the busy wait runs with preemption off, and 5 s stays well
 * below the soft-lockup (20 s) and RCU stall (21 s) reports.
 */
#define SLOW_LOCK_MAX_MS 5000U

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

/*
 * Waits ms milliseconds, busy (a probe cannot sleep) but telling RCU every
 * millisecond that this CPU passed a quiescent state: the slowed task holds no
 * RCU read lock (it is about to take a mutex), and what runs elsewhere, such
 * as a device removal, must not wait for this CPU's grace period meanwhile.
 */
static void slow_lock_wait(unsigned int ms)
{
	unsigned long flags;

	while (ms-- && READ_ONCE(delay_ms)) {
		mdelay(1);
		local_irq_save(flags);
		rcu_momentary_eqs();
		local_irq_restore(flags);
	}
}

static int slow_lock_pre(struct kprobe *p, struct pt_regs *regs)
{
	unsigned int ms = min(READ_ONCE(delay_ms), SLOW_LOCK_MAX_MS);
	size_t len = strnlen(comm, sizeof(comm));

	if (!ms || !len || strncmp(current->comm, comm, len))
		return 0;
	if (!slow_lock_from_target(regs))
		return 0;
	WRITE_ONCE(hits, READ_ONCE(hits) + 1);
	slow_lock_wait(ms);
	return 0;
}

static struct kprobe slow_lock_kp = {
	.symbol_name = "mutex_lock_nested",
	.pre_handler = slow_lock_pre,
};

static int __init slow_lock_init(void)
{
	int ret;

	if (!target[0] || delay_ms > SLOW_LOCK_MAX_MS)
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
