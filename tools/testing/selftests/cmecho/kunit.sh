#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# cmecho's KUnit suites (value types, CM event decoding, setup errors, port
# text, rping wire format, native echo, stats) run at module load.
. "$(dirname "$0")/lib.sh"

SUITES="cmecho_params cmecho_event cmecho_step_error cmecho_netns cmecho_rping cmecho_native cmecho_stats"
ktap_print_header
ktap_set_plan 8
dmesg_mark
debugfs_on
load_cmecho
# A suite passes when it reported ok, no case failed, and none was skipped: a
# suite whose every case skipped would otherwise read "ok".
suite_passed() {
	local r=$1 s=$2
	grep -qE "^ok [0-9]+ $s( |\$)" "$r" && ! grep -q 'not ok' "$r" && ! grep -q '# SKIP' "$r" &&
		[ "$(grep -cE '^ +ok [0-9]+ ' "$r")" -gt 0 ]
}
for s in $SUITES; do
	r=/sys/kernel/debug/kunit/$s/results
	if [ -f $r ]; then
		grep -E '^ *(not )?ok ' $r | sed "s/^ */# $s: /"
		ktap_check "KUnit suite $s: every case ran and passed" suite_passed "$r" "$s"
	else
		ktap_test_fail "KUnit suite $s: every case ran and passed (no results in debugfs)"
	fi
done
unload_cmecho
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
