#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# cmecho's KUnit suites (value types, rping wire format) run at module load.
. "$(dirname "$0")/lib.sh"

SUITES="cmecho_params cmecho_rping cmecho_native"
ktap_print_header
ktap_set_plan 4
dmesg_mark
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
load_cmecho
for s in $SUITES; do
	r=/sys/kernel/debug/kunit/$s/results
	if [ -f $r ]; then
		grep -E '^ *(not )?ok ' $r | sed "s/^ */# $s: /"
		ktap_test_result "KUnit suite $s passes" sh -c "grep -q '^ok [0-9]* $s' $r && ! grep -q 'not ok' $r"
	else
		ktap_test_fail "KUnit suite $s passes (no results in debugfs)"
	fi
done
unload_cmecho
ktap_test_result "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
