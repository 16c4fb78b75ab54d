#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Teardown with live connections never hangs and leaks no CM id: rmmod while
# endpoints exist, rmdir of a pinging client, and `rdma link del` of the server's
# device under live connections, each bounded by a timeout; a disable that
# waits with a signal pending sleeps instead of spinning; and a connection whose
# path dies while every slab allocation of cmecho fails still closes.
. "$(dirname "$0")/lib.sh"

# sig_writer FILE: with a handler for SIGUSR1, enables endpoint sig, then
# disables it, and writes to FILE how long the disable took and how much system
# time this process spent in it, both in ms.
sig_writer() {
	local st t0 s0
	trap ':' USR1
	echo 1 >$CFS/sig/enable
	: >"$1.ready"
	read -ra st </proc/$BASHPID/stat
	t0=${EPOCHREALTIME/./} s0=${st[14]}
	echo 0 >$CFS/sig/enable
	read -ra st </proc/$BASHPID/stat
	echo "$(((${EPOCHREALTIME/./} - t0) / 1000)) $(((st[14] - s0) * 10))" >"$1"
}

# A disable waits for a client's setup, which resolves an address nobody
# answers and is slowed down (every lock cmecho takes in a kworker waits 0.3 s,
# slow_lock in lib.sh), so that it takes a while to give up. The writer gets a
# signal with a handler while it waits, again and again: the wait must sleep
# until the setup ends, not return at once and loop (which spends the whole
# wait as system time). The write must have waited at least 0.3 s for this to
# show anything.
disable_with_signal() {
	local pid wall sys
	endpoint $NS_B sig role=client addr=${ADDR_A%.*}.99 || return 1
	rm -f /tmp/sig.out.ready /tmp/sig.out
	slow_lock_on kworker 300 || return 1
	sig_writer /tmp/sig.out &
	pid=$!
	wait_for 300 test -e /tmp/sig.out.ready
	while kill -USR1 $pid 2>/dev/null; do
		nap 0.1
	done
	wait $pid
	ktap_print_msg "the setup's kworker: $(slow_lock_hits) locks slowed"
	slow_lock_off
	read -r wall sys </tmp/sig.out
	ktap_print_msg "disable with signals pending: took ${wall:-?} ms, ${sys:-?} ms of it as system time"
	state_is sig idle 50 && rmdir $CFS/sig &&
		[ "${wall:-0}" -ge 300 ] && [ $((sys * 2)) -lt "$wall" ]
}

# close_without_memory: an echo client pings its server; then every slab
# allocation made through cmecho's code fails (failslab_on, in every task) and
# the path drops every packet. The client's QP runs out of retries and its
# completion handler closes the connection: that close must not need memory,
# or the connection would stay open with nothing left to close it until the
# client is disabled; and `last_error` must name the failure, which recording
# it must not need memory either. Once allocations work again, both endpoints
# go with nothing left behind. The netem qdiscs are there, losing nothing,
# before the client starts: adding one while rxe transmits fails the QP at
# once (see ack_timeout.sh), a failure other than the one this waits for.
close_without_memory() {
	local hits=0 ok=1 conns
	if ! { tc -n $NS_A qdisc add dev va root netem loss 0% &&
		tc -n $NS_B qdisc add dev vb root netem loss 0%; }; then
		tc -n $NS_A qdisc del dev va root 2>/dev/null
		return 1
	fi
	if endpoint $NS_A msrv role=server mode=echo addr=$ADDR_A port=7820 enable=1 &&
		endpoint $NS_B mcli role=client mode=echo addr=$ADDR_A port=7820 \
			count=10000000 ack_timeout=14 retry_count=2 enable=1 &&
		poll 600 key_now mcli stats connections 1; then
		nap 1
		ktap_print_msg "mcli: $(<$CFS/mcli/state), pings $(ep_get mcli stats pings) before the failure"
		if failslab_on; then
			tc -n $NS_A qdisc change dev va root netem loss 100%
			tc -n $NS_B qdisc change dev vb root netem loss 100%
			wait_done mcli 60
			# The close runs on the module's workqueue: 5 s more with
			# allocations failing, then it must be done. (Listing the
			# connections allocates: it is read with memory back.)
			nap 5
			hits=$(failslab_hits)
			failslab_off
		fi
		ep_diag mcli
		ktap_print_msg "allocations failed through cmecho meanwhile: $hits"
		conns=$(<$CFS/mcli/connections)
		ktap_print_msg "mcli: ${conns:-no connection listed}"
		# Ended is not enough: the connection itself must be closed, its id,
		# QP and buffers released, with no rmdir to do it; and the reason
		# recorded without memory too.
		[ "$(<$CFS/mcli/state)" = error ] && [ "$hits" -gt 0 ] &&
			[ -n "$conns" ] && all_closed mcli &&
			[[ $(<$CFS/mcli/last_error) == *"transport retry counter exceeded"* ]] && ok=0
	else
		ktap_print_msg "mcli: not connected within 60 s"
	fi
	tc -n $NS_A qdisc del dev va root
	tc -n $NS_B qdisc del dev vb root
	timeout 60 rmdir $CFS/mcli || ok=1
	timeout 60 rmdir $CFS/msrv || ok=1
	no_cmecho_cm_ids || ok=1
	return $ok
}

ktap_print_header
ktap_set_plan 12
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

ktap_check "a disable waiting with a signal pending sleeps, not spins" disable_with_signal
ktap_check "a connection whose path dies while cmecho cannot allocate closes, and leaves nothing" \
	close_without_memory

# The live connections' CQs off the default (softirq): the server's on the
# core's unbound workqueue, the client's on its per-CPU one (poll_context).
endpoint $NS_A srv role=server addr=$ADDR_A poll_context=unbound_workqueue enable=1
ip netns exec $NS_B timeout 300 rping -c -a $ADDR_A -C 1000000 -S 64 >/dev/null 2>&1 &
rp=$!
endpoint $NS_B cli role=client addr=$ADDR_A count=10000000 size=64 poll_context=workqueue enable=1
key_is srv stats active 2 3000
ep_diag srv
ktap_check "live connections: the server has 2 established" test "$(ep_get srv stats active)" = 2
# The listener, the server's 2 connections and the client's: seen as cmecho's, so
# that "no id of cmecho left" below means something.
ktap_check "rdma res show cm_id lists cmecho's ids while connections are live" cmecho_cm_ids_seen 4

timeout 30 rmmod cmecho 2>/tmp/rmmod.err
rc=$?
ktap_print_msg "rmmod with live endpoints: exit $rc: $(</tmp/rmmod.err)"
ktap_check "rmmod while endpoints exist is refused at once (configfs holds the module)" \
	test $rc -ne 0 -a $rc -ne 124

timeout 60 rmdir $CFS/cli
ktap_check "rmdir of a client with a live connection returns" test $? -eq 0

timeout 60 rdma link del $RXE_A
ktap_check "rdma link del of the server's device with live connections returns" test $? -eq 0
ep_diag srv
ktap_check "server reports the device removal" grep -q "RDMA device was removed" $CFS/srv/last_error
kill $rp 2>/dev/null
wait $rp 2>/dev/null

ktap_check "rdma res show cm_id: no id of cmecho left" no_cmecho_cm_ids
timeout 60 rmdir $CFS/srv
ktap_check "rmdir of the server after device removal returns" test $? -eq 0
timeout 60 rmmod cmecho
ktap_check "rmmod after rmdir" test $? -eq 0
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
