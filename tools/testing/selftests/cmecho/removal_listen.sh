#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Device removal raced step by step, the other way round from removal_steps.sh:
# a removal at each step of a server's start. Each returns, the listener's id is
# destroyed once (a double destroy shows as a KASAN or SLUB report), the server
# says what happened, and nothing of cmecho is left. A program of its own: each
# step is a device removal and a new rxe link, 25 to 45 s under TCG.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 3
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# A device removal at each step of a server's start. The enabling shell's every
# lock in cmecho, and in what cmecho calls (rdma_bind_addr, rdma_listen), waits
# 1 s (more than starting `rdma` takes here), and the server's device goes away
# while it waits for its k-th lock, k = 1, 2, ... until the enable needs fewer:
# the listener's id is destroyed once, by whoever comes first, the enable
# returns (either way), and the server ends in error and says why.
# hits_or_gone K PID: the slowed task has reached its K-th lock, or has exited.
hits_or_gone() {
	slow_lock_hits_ge "$1" || ! kill -0 "$2" 2>/dev/null
}
removal_in_listen() {
	local k port ok=1 wp rc st le
	for ((k = 1; k <= 20; k++)); do
		port=$((7540 + k))
		endpoint $NS_A srv role=server addr=$ADDR_A port=$port || return 1
		slow_lock_on sh 1000 || return 1
		sh -c "echo 1 >$CFS/srv/enable" 2>/dev/null &
		wp=$!
		wait_for 600 hits_or_gone $k $wp
		if ! slow_lock_hits_ge $k; then
			wait $wp
			ktap_print_msg "the enable took $(slow_lock_hits) locks: each had a removal"
			slow_lock_off
			rmdir $CFS/srv || ok=0
			break
		fi
		rdma link del $RXE_A || ok=0
		wait $wp
		rc=$?
		st=$(<$CFS/srv/state) le=$(<$CFS/srv/last_error)
		ktap_print_msg "k=$k: enable exit $rc; server: $st, $le"
		[ "$st" = error ] && [ "$le" != none ] || ok=0
		slow_lock_off
		rmdir $CFS/srv || ok=0
		no_cmecho_cm_ids || ok=0
		links_up || { ktap_print_msg "rxe links not back"; ok=0; }
	done
	[ $ok = 1 ] && [ $k -gt 1 ]
}
ktap_check "a device removal at each step of a server's start: one destroy, all return, nothing left" \
	removal_in_listen

ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
