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
 *   fault=kasan    a read of a freed kmalloc() object (KASAN: slab-use-after-free)
 *   fault=ubsan    a shift by more than the width of its type (UBSAN)
 *   fault=atomic   a might_sleep() under a spinlock (sleeping in atomic context)
 *   fault=kfence   a read of a freed object that KFENCE sampled (KFENCE:
 *                  use-after-free); allocates until KFENCE takes one, for at
 *                  most 30 s
 *   fault=stack    a dump_stack() with no report before it (the verdict's
 *                  unexplained Call Trace)
 *   fault=rcu      an rcu_dereference() outside any RCU read-side section
 *                  (PROVE_RCU: suspicious RCU usage)
 *   fault=list     a list_del() of an entry already deleted (DEBUG_LIST)
 *   fault=odebug   a kfree() of an armed timer (DEBUG_OBJECTS: free active)
 *   fault=softlockup   6 s with preemption off (soft lockup; canary.sh lowers
 *                  watchdog_thresh to 1 s first)
 *   fault=hardlockup   6 s with interrupts off (the buddy hard lockup detector;
 *                  watchdog_thresh 1 s)
 *   fault=rcu_stall    a grace period started, then 15 s with preemption off
 *                  (RCU CPU stall; canary.sh lowers rcu_cpu_stall_timeout to 3 s)
 *   fault=redzone  a byte written just past a kmalloc(32) object (outside
 *                  KASAN's view), then the object freed: SLUB's red zone check
 *                  ("Right Redzone overwritten") runs when the object really
 *                  goes back to its slab, which KASAN's quarantine defers;
 *                  canary.sh shrinks the kmalloc caches to empty it
 *
 * The Rust half, cmecho_canary_rs.ko (canary_rs.rs), does what only Rust code can
 * show: a use-after-free that KASAN must see in Rust, and an overflow panic.
 */
#include <linux/compiler.h>
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/irqflags.h>
#include <linux/jiffies.h>
#include <linux/kfence.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/timer.h>

static char fault[16];
module_param_string(fault, fault, sizeof(fault), 0444);
MODULE_PARM_DESC(fault, "warn, leak, lockdep, hang, panic, kasan, ubsan, atomic, kfence, stack, rcu, list, odebug, softlockup, hardlockup, rcu_stall or redzone");

static DEFINE_MUTEX(canary_a);
static DEFINE_MUTEX(canary_b);
static DECLARE_COMPLETION(canary_never);
static DEFINE_SPINLOCK(canary_spin);
static int canary_rcu_target;
static int __rcu *canary_rcu_ptr;

/* Each fault in a function of its own, so that the report names it. */
static noinline int cmecho_canary_kasan(void)
{
	char *p = kmalloc(32, GFP_KERNEL);

	if (!p)
		return -ENOMEM;
	kfree(p);
	OPTIMIZER_HIDE_VAR(p);
	pr_info("cmecho_canary: read after free: %d\n", READ_ONCE(p[0]));
	return 0;
}

static noinline int cmecho_canary_ubsan(void)
{
	volatile int shift = 40;

	pr_info("cmecho_canary: 1 << 40 = %d\n", 1 << shift);
	return 0;
}

static noinline int cmecho_canary_atomic(void)
{
	spin_lock(&canary_spin);
	might_sleep();
	spin_unlock(&canary_spin);
	return 0;
}

static noinline __no_sanitize_address char cmecho_canary_peek(const char *p)
{
	return READ_ONCE(*p);
}

/* A store KASAN does not check, so that SLUB's own red zone check sees it. */
static noinline __no_sanitize_address void cmecho_canary_poke(char *p)
{
	WRITE_ONCE(*p, 0x55);
}

static noinline int cmecho_canary_redzone(void)
{
	char *p;

	/*
	 * An object KFENCE sampled has KFENCE's guards around it, not SLUB's red
	 * zones: take another (KFENCE takes one allocation in many).
	 */
	for (;;) {
		p = kmalloc(32, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		if (!is_kfence_address(p))
			break;
		kfree(p);
	}
	/* kmalloc-32 has no slack: byte 32 is the first of the right red zone. */
	cmecho_canary_poke(p + 32);
	kfree(p);
	return 0;
}

static noinline int cmecho_canary_rcu(void)
{
	int *p;

	RCU_INIT_POINTER(canary_rcu_ptr, &canary_rcu_target);
	p = rcu_dereference(canary_rcu_ptr);
	pr_info("cmecho_canary: read outside RCU: %d\n", *p);
	return 0;
}

static noinline int cmecho_canary_list(void)
{
	LIST_HEAD(head);
	struct list_head entry;

	list_add(&entry, &head);
	list_del(&entry);
	list_del(&entry);
	return 0;
}

struct cmecho_canary_timer {
	struct timer_list timer;
};

static void cmecho_canary_timer_fn(struct timer_list *t)
{
}

static noinline int cmecho_canary_odebug(void)
{
	struct cmecho_canary_timer *c = kmalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return -ENOMEM;
	timer_setup(&c->timer, cmecho_canary_timer_fn, 0);
	mod_timer(&c->timer, jiffies + 3600 * HZ);
	/* DEBUG_OBJECTS reports the active timer and deletes it before the free. */
	kfree(c);
	return 0;
}

/* Busy for SECS seconds on this CPU, with preemption or interrupts off. */
static noinline void cmecho_canary_busy(bool irqs_off, unsigned int secs)
{
	unsigned long flags = 0;
	unsigned int ms;

	if (irqs_off)
		local_irq_save(flags);
	else
		preempt_disable();
	for (ms = 0; ms < secs * 1000; ms++)
		mdelay(1);
	if (irqs_off)
		local_irq_restore(flags);
	else
		preempt_enable();
}

static noinline int cmecho_canary_rcu_stall(void)
{
	/* A grace period of the lowered stall timeout, then this CPU holds it. */
	synchronize_rcu();
	start_poll_synchronize_rcu();
	cmecho_canary_busy(false, 15);
	return 0;
}

static noinline int cmecho_canary_kfence(void)
{
	unsigned long end = jiffies + 30 * HZ;
	char *p;

	for (;;) {
		p = kmalloc(32, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		if (is_kfence_address(p))
			break;
		kfree(p);
		if (time_after(jiffies, end)) {
			pr_err("cmecho_canary: KFENCE took none of the allocations of 30 s\n");
			return -ETIMEDOUT;
		}
		cond_resched();
	}
	kfree(p);
	OPTIMIZER_HIDE_VAR(p);
	pr_info("cmecho_canary: read after free: %d\n", cmecho_canary_peek(p));
	return 0;
}

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
	} else if (!strcmp(fault, "kasan")) {
		return cmecho_canary_kasan();
	} else if (!strcmp(fault, "ubsan")) {
		return cmecho_canary_ubsan();
	} else if (!strcmp(fault, "atomic")) {
		return cmecho_canary_atomic();
	} else if (!strcmp(fault, "kfence")) {
		return cmecho_canary_kfence();
	} else if (!strcmp(fault, "stack")) {
		pr_info("cmecho_canary: dump_stack\n");
		dump_stack();
	} else if (!strcmp(fault, "rcu")) {
		return cmecho_canary_rcu();
	} else if (!strcmp(fault, "list")) {
		return cmecho_canary_list();
	} else if (!strcmp(fault, "odebug")) {
		return cmecho_canary_odebug();
	} else if (!strcmp(fault, "softlockup")) {
		cmecho_canary_busy(false, 6);
	} else if (!strcmp(fault, "hardlockup")) {
		cmecho_canary_busy(true, 6);
	} else if (!strcmp(fault, "rcu_stall")) {
		return cmecho_canary_rcu_stall();
	} else if (!strcmp(fault, "redzone")) {
		return cmecho_canary_redzone();
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
