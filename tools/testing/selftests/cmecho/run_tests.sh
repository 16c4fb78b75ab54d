#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs the Makefile's TEST_PROGS with the kernel's own kselftest runner
# (kselftest/runner.sh: per-program timeout from ./settings, one KTAP result per
# program with the program's output nested under it), then asks kmemleak, with
# every cmecho module unloaded, what is left.
#   run_tests.sh [RESULTS_DIR]   KTAP on stdout and in RESULTS_DIR/selftests.ktap;
#                                the kernel log in dmesg.log (from the boot to an
#                                end marker), kmemleak's report in kmemleak.txt,
#                                the KTAP lines with the guest's uptime and idle
#                                time in times.log, the kernel's taint and
#                                lockdep's debug_locks before and after in
#                                kernel-state.start and kernel-state.end, and
#                                run-complete once all is done.
# CMECHO_TESTS="a.sh b.sh" runs a subset (the plan is then that subset).
cd "$(dirname "$0")" || exit 1
BASE_DIR=$(cd .. && pwd)
export BASE_DIR
[ -f "$BASE_DIR/kselftest/runner.sh" ] ||
	{ echo "Bail out! no $BASE_DIR/kselftest/runner.sh (run scripts/ksft-links)"; exit 1; }
. "$BASE_DIR/kselftest/runner.sh"
# The runner writes each program's output to $logfile, /dev/stdout by default; in
# a virtme-ng guest that is a serial port of its own, not this script's stdout,
# so the nested KTAP would miss the tee below and arrive out of order on the host.
logfile=/dev/fd/1
# With tr found, the runner pipes each program's name through tr four times to
# look up KSELFTEST_<NAME>_ARGS, which no program here takes: four processes,
# about three seconds of the guest's time, per program.
TR_CMD=

results=${1:-}
# Under TCG every process costs about half a second: where udevd runs, it runs
# its rules (rdma_rename, network link setup, ...) in processes of their own for
# every veth, rxe device and namespace the programs make. The programs need
# none of it (devtmpfs makes the device nodes; scripts/vm-run boots without it):
# stop it, if there is one.
udevadm control --exit 2>/dev/null
read -r -a progs <<<"${CMECHO_TESTS:-$(sed -n 's/^TEST_PROGS *:= *//p' Makefile)}"
# The programs share one network (lib.sh, net_setup): each takes over the one
# the program before it left, unless that one changed it. CMECHO_NET_KEEP=0
# gives each program a network of its own.
export CMECHO_NET_KEEP=${CMECHO_NET_KEEP:-1}

# stamp FILE: copies stdin to stdout and, each line with the guest's uptime and
# idle time (the two columns of /proc/uptime; idle sums over the vCPUs) in front,
# to FILE: where a run's time goes, and how much of it the vCPUs were busy.
stamp() {
	local line up idle
	while IFS= read -r line; do
		printf '%s\n' "$line"
		read -r up idle </proc/uptime
		printf '%s %s %s\n' "$up" "$idle" "$line" >>"$1"
	done
}

# kernel_state FILE: the kernel's taint mask, lockdep's debug_locks (0 once
# lockdep has turned itself off) and the number of vCPUs, one "key value" a line.
kernel_state() {
	local t k v dl=unknown
	read -r t </proc/sys/kernel/tainted
	while read -r k v; do
		[ "$k" = debug_locks: ] && dl=$v && break
	done </proc/lockdep_stats
	printf 'tainted %s\ndebug_locks %s\ncpus %s\n' "$t" "$dl" "$(nproc)" >"$1"
}

ktap_file=/dev/null
times_file=/dev/null
if [ -n "$results" ]; then
	times_file=$results/times.log
	rm -f "$results/run-complete" "$results/kernel-state.start" "$results/kernel-state.end"
	kernel_state "$results/kernel-state.start"
	ktap_file=$results/selftests.ktap
	# Stream the kernel log next to the results, so a crash leaves its trace.
	dmesg -w >"$results/dmesg.log" 2>&1 </dev/null &
	dmesg_pid=$!
fi

{
	ktap_print_header
	ktap_set_plan "${#progs[@]}"
	run_many "${progs[@]/#/./}"
	ktap_print_totals
} | tee "$ktap_file" | stamp "$times_file"

# The shared network goes with the last program.
[ "$CMECHO_NET_KEEP" != 1 ] || bash -c '. ./lib.sh && trap - EXIT && net_drop_kept' >&2

# kmemleak, once nothing of cmecho is loaded: a scan reports an object that is
# unreferenced, unchanged since the scan before, and older than 5 s when the scan
# starts. So scan twice, the second at least 6 s after the first started (every
# object of the run is older than the first scan); under TCG a scan alone takes
# longer than that, so the wait is what is left of the 6 s, if anything.
if [ -n "$results" ]; then
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	grep -E '^cmecho' /proc/modules >"$results/modules-left.txt"
	# A kmemleak that turned itself off refuses the scan (EPERM) and reports
	# nothing: say so in the report's place, and the verdict fails.
	if [ -w /sys/kernel/debug/kmemleak ]; then
		scan1=$SECONDS
		if ! err=$({ echo scan >/sys/kernel/debug/kmemleak; } 2>&1) ||
			! sleep $((SECONDS - scan1 < 7 ? 7 - (SECONDS - scan1) : 0)) ||
			! err=$({ echo scan >/sys/kernel/debug/kmemleak; } 2>&1) ||
			! cat /sys/kernel/debug/kmemleak >"$results/kmemleak.txt"; then
			echo "kmemleak: scan failed: ${err:-cannot read the report}" >"$results/kmemleak.txt"
		fi
	else
		echo "kmemleak: /sys/kernel/debug/kmemleak is not available" >"$results/kmemleak.txt"
	fi
	kernel_state "$results/kernel-state.end"
	# The end marker: the verdict fails unless dmesg.log holds it, and vm-run's
	# start line, so a dmesg -w that died on the way is seen.
	echo "<4>cmecho: run_tests.sh: end of the kernel log of this run" >/dev/kmsg
	sleep 1
	kill $dmesg_pid 2>/dev/null
	echo "${#progs[@]}" >"$results/run-complete"
fi
exit 0
