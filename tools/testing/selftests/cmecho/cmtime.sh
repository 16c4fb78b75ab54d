#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The cmtime sample, built from the same rdma layer sources as cmecho.ko, times
# every CM step over 20 connections to a cmecho server: one connection after
# another, then all at once (each step for all connections, as rdma-core's
# cmtime does).
. "$(dirname "$0")/lib.sh"

CMTIME_KO=${CMTIME_KO:-$(dirname "$CMECHO_KO")/cmecho_cmtime.ko}
STEPS="create_id resolve_addr resolve_route create_qp connect disconnect destroy"

# run_log: what the run logged since dmesg_mark RUN_START, into KLOG (lib.sh),
# its cmecho_cmtime lines printed. Lines are matched with builtins: on the
# debug kernel under TCG a process costs about a second.
run_log() {
	local line
	klog_from "$RUN_START"
	for line in "${KLOG[@]}"; do
		[[ $line == *"cmecho_cmtime:"* ]] && printf '# %s\n' "${line#\[*\] }"
	done
}

# run_log_has PATTERN: a line of the run's log matches the glob *PATTERN*.
run_log_has() {
	local line
	for line in "${KLOG[@]}"; do
		# shellcheck disable=SC2053
		[[ $line == *$1* ]] && return 0
	done
	return 1
}

# check_steps: each step reported in the run's log, with
# min <= avg <= max <= total (a connection's part lies within the step's wall
# time) and per_conn = total / 20.
check_steps() {
	local s line rep ok=1
	local re=' total ([0-9]+) per_conn ([0-9]+) min ([0-9]+) avg ([0-9]+) max ([0-9]+) us$'
	for s in $STEPS; do
		rep=
		for line in "${KLOG[@]}"; do
			[[ $line == *"cmecho_cmtime: step $s total "* ]] && rep=$line
		done
		if [[ $rep =~ $re ]]; then
			set -- "${BASH_REMATCH[@]:1}"
			[ "$3" -le "$4" ] && [ "$4" -le "$5" ] && [ "$5" -le "$1" ] &&
				[ "$2" -eq $(($1 / 20)) ] && continue
		fi
		ktap_print_msg "step $s: bad report '$rep'"
		ok=0
	done
	test $ok = 1
}

ktap_print_header
ktap_set_plan 8
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"
endpoint $NS_A srv role=server addr=$ADDR_A enable=1

dmesg_mark RUN_START
ip netns exec $NS_B timeout 300 insmod "$CMTIME_KO" addr=$ADDR_A port=7174 conns=20
ktap_check "insmod cmecho_cmtime conns=20 in netns b" test $? -eq 0
run_log
ktap_check "20 of 20 connections ok, one after another" \
	run_log_has "cmecho_cmtime: 20 of 20 connections to $ADDR_A:7174 ok (netns *, one after another"
ktap_check "every step reported with min <= avg <= max <= total" check_steps
rmmod cmecho_cmtime

dmesg_mark RUN_START
ip netns exec $NS_B timeout 300 insmod "$CMTIME_KO" addr=$ADDR_A port=7174 conns=20 at_once=1
ktap_check "insmod cmecho_cmtime conns=20 at_once=1 in netns b" test $? -eq 0
run_log
ktap_check "20 of 20 connections ok, all at once" \
	run_log_has "cmecho_cmtime: 20 of 20 connections to $ADDR_A:7174 ok (netns *, all at once"
ktap_check "every step reported with min <= avg <= max <= total, all at once" check_steps
rmmod cmecho_cmtime

ktap_check "the server accepted 40 connections" test "$(ep_get srv stats connections)" = 40
unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
