#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The harness's negative control (scripts/check --canary), not one of TEST_PROGS.
# CMECHO_CANARY lists cases, run in that order: warn, leak, lockdep, hang and panic
# load cmecho_canary.ko with that fault; unfinished ends this program one result
# before its plan, with exit status 0, as a test cut short would. Every case must
# make the count fail in the check that names it.
. "$(dirname "$0")/lib.sh"

CANARY_KO=$(dirname "$CMECHO_KO")/cmecho_canary.ko
read -r -a cases <<<"${CMECHO_CANARY:-}"
faults=()
unfinished=0
for c in "${cases[@]}"; do
	case $c in
	unfinished) unfinished=1 ;;
	*) faults+=("$c") ;;
	esac
done
ktap_print_header
ktap_set_plan $((2 + ${#faults[@]}))
ktap_check "cmecho_canary.ko exists and CMECHO_CANARY names cases" \
	test -f "$CANARY_KO" -a ${#cases[@]} -gt 0
for f in "${faults[@]}"; do
	# The hung-task detector reports a task blocked for its timeout (60 s in
	# this kernel's config, for the real runs); writing the sysctl wakes it, so
	# the hang case is reported within 10 to 20 s instead of 60 to 120.
	[ "$f" != hang ] || echo 10 >/proc/sys/kernel/hung_task_timeout_secs
	ktap_check "insmod cmecho_canary.ko fault=$f" insmod "$CANARY_KO" fault="$f"
	rmmod cmecho_canary 2>/dev/null
done
if [ $unfinished = 1 ]; then
	ktap_print_msg "canary: ending one result before the plan, with exit status 0"
	exit 0
fi
ktap_test_pass "canary.sh reached its plan"
ktap_finished
