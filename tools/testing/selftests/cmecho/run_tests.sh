#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs the Makefile's TEST_PROGS with the kernel's own kselftest runner
# (kselftest/runner.sh: per-program timeout from ./settings, one KTAP result per
# program with the program's output nested under it), then asks kmemleak, with
# every cmecho module unloaded, what is left.
#   run_tests.sh [RESULTS_DIR]   KTAP on stdout and in RESULTS_DIR/selftests.ktap;
#                                the kernel log in dmesg.log, kmemleak's report in
#                                kmemleak.txt, the KTAP lines with the guest's
#                                uptime in times.log, and run-complete once all
#                                is done.
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

# stamp FILE: copies stdin to stdout and, each line with the guest's uptime in
# front (as in the kernel log), to FILE: where a run's time goes.
stamp() {
	local line up
	while IFS= read -r line; do
		printf '%s\n' "$line"
		read -r up _ </proc/uptime
		printf '%s %s\n' "$up" "$line" >>"$1"
	done
}

ktap_file=/dev/null
times_file=/dev/null
if [ -n "$results" ]; then
	times_file=$results/times.log
	rm -f "$results/run-complete"
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

# kmemleak, once nothing of cmecho is loaded: objects are reported once they are
# unreferenced and older than 5 s, so scan, wait, scan again.
if [ -n "$results" ]; then
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	grep -E '^cmecho' /proc/modules >"$results/modules-left.txt"
	if [ -w /sys/kernel/debug/kmemleak ]; then
		echo scan >/sys/kernel/debug/kmemleak
		sleep 6
		echo scan >/sys/kernel/debug/kmemleak
		cat /sys/kernel/debug/kmemleak >"$results/kmemleak.txt"
	else
		echo "kmemleak: /sys/kernel/debug/kmemleak is not available" >"$results/kmemleak.txt"
	fi
	sleep 1
	kill $dmesg_pid 2>/dev/null
	echo "${#progs[@]}" >"$results/run-complete"
fi
exit 0
