#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Device removal raced step by step: a close at each step of the removal's own
# handler (removal_listen.sh: a removal at each step of a server's start;
# removal.sh races it with whole operations). Each returns, the id is destroyed
# once (a double destroy shows as a KASAN or SLUB report), each endpoint says
# what happened, and nothing of cmecho is left. Then the two gaps of a removal
# around ESTABLISHED: a server's connection not yet established, and a
# client's connect that has not returned yet. A program of its own: each step
# is a device removal and a new rxe link, 25 to 45 s under TCG.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 5
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

# A server's connections removed before they are established (the peer holds
# the replies, never sending the RTU): released at once, as when the peer
# rejects the reply, not kept against max_conns and the memory budget until
# the server is disabled (accept_timeout_ms is long here).
PEER=$SELFTEST_DIR/hostile_peer
endpoint $NS_A held role=server mode=echo addr=$ADDR_A port=7540 accept_timeout_ms=600000 enable=1
ip netns exec $NS_B timeout 100 "$PEER" client $ADDR_A 7540 hold 2 60 0 100 >/tmp/peer_rm.log 2>&1 &
peer=$!
key_is held stats connections 2 600 || ktap_print_msg "held: the requests did not come"
rdma link del $RXE_A
held_closed() { all_closed held; }
poll 300 held_closed
ktap_print_msg "held: $(<$CFS/held/state); connections: $(tr '\n' ';' <$CFS/held/connections)"
ktap_check "server connections removed before they are established are released at once" held_closed
kill $peer 2>/dev/null
wait $peer
sed 's/^/# peer hold: /' /tmp/peer_rm.log
rmdir $CFS/held
links_up || ktap_print_msg "rxe links not back"

# A removal between a client's ESTABLISHED and the return of its connect.
# Connects run on cmecho's unbound workqueue, the CM's ESTABLISHED handler on
# the bound ib_cm one: slow_lock slows cmecho's locks in unbound workers only.
# Once the connection's route is resolved, each waits 5 s, so the connect
# takes two more locks, 10 s, after the handler made the client running (under
# TCG the command takes seconds to start and rxe to unregister: with 2 s a lock
# the removal came too late, twice in two tries). The removal's command, forked
# beforehand, polls for that itself. The client ends in error, saying why.
# The server's accept runs on that workqueue too and is slowed as much: its
# accept_timeout_ms is long enough for that. So is the client's
# echo_timeout_ms: the echo of a message the removal keeps from coming must
# not fail the client first.
# Once the CM has handed the removal to cmecho's handler (the rdma_cma
# tracepoint cm_event_handler with DEVICE_REMOVAL, in a trace instance of this
# program's), the slowing ends: what follows needs no window, and at 5 s a
# lock the rest of the removal took 5 minutes. The hand-over itself waits
# for cmecho's workers (156 s at 5 s a lock, in one run): 20 s after the
# client is running, the connect's two locks are behind it, and the locks
# wait 0.3 s again. The removal is issued inside the window; when the CM
# hands it over depends on those workers: before the first echo in one run,
# after 1 to 10 in others (last_error says how many).
RT=$TR/instances/cmecho_removal_steps
rmdir $RT 2>/dev/null
tracefs_on && mkdir $RT && echo 'event == 11' >$RT/events/rdma_cma/cm_event_handler/filter &&
	echo 1 >$RT/events/rdma_cma/cm_event_handler/enable ||
	ktap_print_msg "cannot trace rdma_cma's cm_event_handler"
# removal_handed PID: a DEVICE_REMOVAL event went to a handler, or the
# removal's command PID has ended.
removal_handed() {
	local t
	t=$(<$RT/trace)
	[[ $t == *DEVICE_REMOVAL* ]] || ! kill -0 "$1" 2>/dev/null
}
endpoint $NS_A esrv role=server mode=echo addr=$ADDR_A port=7541 accept_timeout_ms=600000 enable=1
slow_lock_on kworker/u 300
endpoint $NS_B ecli role=client mode=echo addr=$ADDR_A port=7541 count=10000000 \
	connect_timeout_ms=600000 echo_timeout_ms=600000 enable=1
# route_now: the client's connection has its route, or got further.
route_now() {
	local line
	read -r line <$CFS/ecli/connections
	[[ $line == *"state route_resolved"* || $line == *"state established"* ]]
}
t0=$SECONDS
poll 1200 route_now || ktap_print_msg "ecli: no route: $(<$CFS/ecli/connections)"
echo 5000 >$SLOW_LOCK_PARAMS/delay_ms
(state_is ecli running 1200 && exec rdma link del $RXE_B) &
rp=$!
state_is ecli running 1200
t1=$SECONDS
poll 200 removal_handed $rp || echo 300 >$SLOW_LOCK_PARAMS/delay_ms
poll 3000 removal_handed $rp
grep -q DEVICE_REMOVAL $RT/trace || ktap_print_msg "ecli: no DEVICE_REMOVAL event in the trace"
t2=$SECONDS
slow_lock_off
wait $rp
state_is ecli error 300
ktap_print_msg "ecli: running $((t1 - t0)) s after its route, the removal handed over $((t2 - t1)) s later, done $((SECONDS - t2)) s after that"
ktap_print_msg "ecli: $(<$CFS/ecli/state); $(slow_lock_hits) slowed locks; last_error: $(<$CFS/ecli/last_error)"
echo 0 >$RT/events/rdma_cma/cm_event_handler/enable
rmdir $RT
ktap_check "a removal between ESTABLISHED and connect's return: the client ends in error, with the reason" \
	test "$(<$CFS/ecli/state)" = error -a "$(grep -c 'RDMA device was removed' $CFS/ecli/last_error)" = 1
rmdir $CFS/ecli $CFS/esrv
links_up || ktap_print_msg "rxe links not back"

ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
