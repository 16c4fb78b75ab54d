#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The harness's negative control (scripts/check --canary), not one of TEST_PROGS.
# CMECHO_CANARY lists cases, run in that order. Most load cmecho_canary.ko with
# that fault (canary/canary.c lists them); kasan_rust, overflow and debug_assert
# load its Rust half, cmecho_canary_rs.ko (canary/canary_rs.rs); unfinished ends
# this program one result before its plan, with exit status 0, as a test cut
# short would. Every case must make the count fail in the check that names it.
. "$(dirname "$0")/lib.sh"

CANARY_KO=$(dirname "$CMECHO_KO")/cmecho_canary.ko
CANARY_RS_KO=$(dirname "$CMECHO_KO")/cmecho_canary_rs.ko
read -r -a cases <<<"${CMECHO_CANARY:-}"
faults=()
unfinished=0
for c in "${cases[@]}"; do
	case $c in
	unfinished) unfinished=1 ;;
	# Verdict checks the group's other cases fail: nothing to load.
	tainted | debug_locks) ;;
	*) faults+=("$c") ;;
	esac
done
ktap_print_header
ktap_set_plan $((2 + ${#faults[@]}))
ktap_check "cmecho_canary.ko and cmecho_canary_rs.ko exist and CMECHO_CANARY names cases" \
	test -f "$CANARY_KO" -a -f "$CANARY_RS_KO" -a ${#cases[@]} -gt 0
for f in "${faults[@]}"; do
	# The detectors' thresholds are those of the real runs (hung task 60 s,
	# lockups 10 s, RCU stalls 60 s); the cases lower them to fire in seconds,
	# and put them back after. Writing hung_task_timeout_secs wakes the
	# detector; it names a task blocked through two of its checks, so the hang
	# case is reported within 2 to 6 s.
	case $f in
	hang) echo 2 >/proc/sys/kernel/hung_task_timeout_secs ;;
	softlockup | hardlockup) echo 1 >/proc/sys/kernel/watchdog_thresh ;;
	rcu_stall)
		read -r stall </sys/module/rcupdate/parameters/rcu_cpu_stall_timeout
		echo 3 >/sys/module/rcupdate/parameters/rcu_cpu_stall_timeout
		;;
	esac
	case $f in
	kasan_rust) ktap_check "insmod cmecho_canary_rs.ko use_after_free=1" insmod "$CANARY_RS_KO" use_after_free=1 ;;
	overflow) ktap_check "insmod cmecho_canary_rs.ko overflow=1" insmod "$CANARY_RS_KO" overflow=1 ;;
	debug_assert) ktap_check "insmod cmecho_canary_rs.ko debug_assert=1" insmod "$CANARY_RS_KO" debug_assert=1 ;;
	*) ktap_check "insmod cmecho_canary.ko fault=$f" insmod "$CANARY_KO" fault="$f" ;;
	esac
	case $f in
	softlockup | hardlockup) echo 10 >/proc/sys/kernel/watchdog_thresh ;;
	rcu_stall) echo "$stall" >/sys/module/rcupdate/parameters/rcu_cpu_stall_timeout ;;
	# The freed object waits in KASAN's quarantine; shrinking its cache
	# (kmalloc(32, GFP_KERNEL): kmalloc-32, the kernel has no random kmalloc
	# caches) empties the quarantine of that cache's objects, and SLUB checks
	# each as it frees it.
	redzone) echo 1 >/sys/kernel/slab/kmalloc-32/shrink ;;
	esac
	rmmod cmecho_canary cmecho_canary_rs 2>/dev/null
done
if [ $unfinished = 1 ]; then
	ktap_print_msg "canary: ending one result before the plan, with exit status 0"
	exit 0
fi
ktap_test_pass "canary.sh reached its plan"
ktap_finished
