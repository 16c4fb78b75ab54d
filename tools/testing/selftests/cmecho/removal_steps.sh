#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Device removal raced step by step: a close at each step of the removal's own
# handler (removal_listen.sh: a removal at each step of a server's start;
# removal.sh races it with whole operations). Each returns, the id is destroyed
# once (a double destroy shows as a KASAN or SLUB report), each endpoint says
# what happened, and nothing of cmecho is left. A program of its own: each step
# is a device removal and a new rxe link, 25 to 45 s under TCG.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 3
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# A close at each step of a device removal's handler. The rdma tool's every lock
# in cmecho waits 0.3 s (slow_lock in lib.sh), and the client disables while
# the removal waits for its k-th lock, k = 1 to 6, one removal each: the id is
# destroyed once whoever comes first (a second destroy is a KASAN report), and
# the removal, the disable and the rmdirs return.
close_in_removal() {
	local k port ok=1 rp
	for ((k = 1; k <= 6; k++)); do
		port=$((7530 + k))
		endpoint $NS_A srv role=server addr=$ADDR_A port=$port enable=1 &&
			endpoint $NS_B cli role=client addr=$ADDR_A port=$port count=10000000 enable=1 &&
			key_is srv stats active 1 600 || { ktap_print_msg "k=$k: not connected"; ok=0; }
		slow_lock_on rdma 300 || return 1
		rdma link del $RXE_B &
		rp=$!
		# Whoever wins, the removal takes at least 4 locks in cmecho: fewer
		# means the tool no longer slows it, and nothing was tested.
		wait_for 300 slow_lock_hits_ge $k ||
			{ ktap_print_msg "k=$k: the removal took fewer locks"; [ $k -gt 4 ] || ok=0; }
		echo 0 >$CFS/cli/enable || ok=0
		wait $rp || ok=0
		ktap_print_msg "k=$k: the removal took $(slow_lock_hits) locks in cmecho; client: $(<$CFS/cli/state), $(<$CFS/cli/last_error)"
		slow_lock_off
		rmdir $CFS/cli $CFS/srv || ok=0
		no_cmecho_cm_ids || ok=0
		links_up || { ktap_print_msg "rxe links not back"; ok=0; }
	done
	[ $ok = 1 ]
}
ktap_check "a close at each step of the removal's handler: one destroy, all return, nothing left" \
	close_in_removal

ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
