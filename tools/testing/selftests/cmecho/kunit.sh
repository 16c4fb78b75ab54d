#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# cmecho's KUnit suites (value types, CM event decoding, setup errors, port
# text, rping wire format, native echo, stats, the connection state machine,
# knob limits, error text, the ack-timeout advisor) run at module load. The
# suites checked are those in debugfs whose name starts with cmecho_, so that
# a new one is checked with no change here; there are at least the 12 of today, so
# that one that goes away (or a module loaded without its tests) fails.
. "$(dirname "$0")/lib.sh"

MIN_SUITES=13
ktap_print_header
dmesg_mark
debugfs_on
load_cmecho
suites=()
for d in /sys/kernel/debug/kunit/cmecho_*/; do
	[ -d "$d" ] || continue
	d=${d%/}
	suites+=("${d##*/}")
done
# One result per suite found, one for each suite missing below the minimum,
# and the kernel log's.
n=${#suites[@]}
ktap_set_plan $(((n > MIN_SUITES ? n : MIN_SUITES) + 1))
ktap_print_msg "KUnit suites of cmecho in debugfs: $n (${suites[*]}), $MIN_SUITES or more expected"
# suite_result RESULTS SUITE: prints the suite's case lines as diagnostics; true
# when the suite reported ok, no case failed, none was skipped (a suite whose
# every case skipped would otherwise read "ok") and at least one ran. One awk,
# not a grep per rule: under TCG each process costs half a second.
suite_result() {
	awk -v s="$2" '
		/^ *(not )?ok / { l = $0; sub(/^ */, "", l); print "# " s ": " l }
		$0 ~ "^ok [0-9]+ " s "( |$)" { top = 1 }
		/not ok/ || /# SKIP/ { bad = 1 }
		/^ +ok [0-9]+ / { cases++ }
		END { exit !(top && !bad && cases > 0) }' "$1"
}
for s in "${suites[@]}"; do
	r=/sys/kernel/debug/kunit/$s/results
	if [ ! -f $r ]; then
		ktap_test_fail "KUnit suite $s: every case ran and passed (no results in debugfs)"
	elif suite_result "$r" "$s"; then
		ktap_test_pass "KUnit suite $s: every case ran and passed"
	else
		# What the failed cases said: KUnit's expectations, and the lines a
		# suite prints itself (a table row the code disagrees with, say),
		# from the results and the kernel log.
		grep -E '^ *# ' $r | grep -v '# Subtest' | head -40 | sed "s/^ */# $s: /"
		dmesg_since | grep -E 'cmecho.*(:[0-9]+: |Expected )' | head -40 | sed 's/^/# dmesg: /'
		ktap_test_fail "KUnit suite $s: every case ran and passed"
	fi
done
for ((i = n; i < MIN_SUITES; i++)); do
	ktap_test_fail "KUnit suites of cmecho: $MIN_SUITES or more in debugfs, $n found"
done
unload_cmecho
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
