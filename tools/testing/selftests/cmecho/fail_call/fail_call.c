// SPDX-License-Identifier: GPL-2.0
/*
 * A test tool of cmecho's selftests: it makes a kernel function fail, so that
 * an error path cmecho must handle runs although the device never takes it on
 * its own (e.g. rxe never fails a fast registration that cmecho posts). While
 * loaded, the next times= calls of func= do not run: they return err= to their
 * caller at once. hits counts the calls that failed so far.
 *
 *   insmod cmecho_fail_call.ko func=rxe_reg_fast_mr err=-22 times=1
 *
 * func must return an int or a pointer-sized value, and its caller must check
 * it; the module that defines it must be loaded first. x86-64 only, like the
 * selftests. cmecho.ko itself is not changed for it.
 */
#include <linux/atomic.h>
#include <linux/kprobes.h>
#include <linux/module.h>

static char func[KSYM_NAME_LEN];
module_param_string(func, func, sizeof(func), 0444);
MODULE_PARM_DESC(func, "the function to fail");

static int err = -EINVAL;
module_param(err, int, 0444);
MODULE_PARM_DESC(err, "what the failed calls return, a negative errno");

static unsigned int times = 1;
module_param(times, uint, 0444);
MODULE_PARM_DESC(times, "how many calls fail, from the first after loading");

static unsigned int hits;
module_param(hits, uint, 0444);
MODULE_PARM_DESC(hits, "calls failed so far");

static atomic_t fail_call_left;

/*
 * Runs instead of the failed call: the probe sends the call here with the
 * stack of its first instruction, so this returns to func's caller.
 */
static noinline long fail_call_ret(void)
{
	return READ_ONCE(err);
}

static int fail_call_pre(struct kprobe *p, struct pt_regs *regs)
{
	if (atomic_dec_if_positive(&fail_call_left) < 0)
		return 0;
	WRITE_ONCE(hits, READ_ONCE(hits) + 1);
	instruction_pointer_set(regs, (unsigned long)fail_call_ret);
	/* Not 0: the probe changed the instruction pointer, nothing to single-step. */
	return 1;
}

static struct kprobe fail_call_kp = {
	.pre_handler = fail_call_pre,
};

static int __init fail_call_init(void)
{
	int ret;

	if (!func[0] || err >= 0 || err < -MAX_ERRNO)
		return -EINVAL;
	/*
	 * Only an ftrace-based probe (at the function's entry) is known to honour
	 * a changed instruction pointer here: an int3 probe may be optimized into
	 * a jump, which ignores it.
	 */
	atomic_set(&fail_call_left, times);
	fail_call_kp.symbol_name = func;
	ret = register_kprobe(&fail_call_kp);
	if (ret)
		return ret;
	if (!kprobe_ftrace(&fail_call_kp)) {
		unregister_kprobe(&fail_call_kp);
		return -EOPNOTSUPP;
	}
	pr_info("cmecho_fail_call: the next %u calls of %s return %d\n", times, func, err);
	return 0;
}

static void __exit fail_call_exit(void)
{
	unregister_kprobe(&fail_call_kp);
	pr_info("cmecho_fail_call: %u calls of %s failed\n", hits, func);
}

module_init(fail_call_init);
module_exit(fail_call_exit);
MODULE_DESCRIPTION("cmecho selftests: make the next calls of a function fail");
MODULE_LICENSE("GPL");
