#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Device removal racing everything else: the server's device removed while the
# server closes its 16 connections, the client's device removed while its 16
# connections close, while its 16 connections connect and get no answer,
# during one connect that gets no answer, and under 64 live connections
# (removal_steps.sh races it step by step). Each returns, each endpoint says
# what happened, nothing of cmecho is left, and the kernel log has no report
# (a double destroy shows as a KASAN or SLUB report).
. "$(dirname "$0")/lib.sh"

ROUNDS=2

ktap_print_header
ktap_set_plan 7
dmesg_mark
load_cmecho

# Polls use builtins only (nap, state_is, key_is from lib.sh).

# busy PORT [KNOB...]: a server on PORT in a and a client with 16 connections
# in b, both with KNOB..., pinging; true once all 16 are established.
busy() {
	local port=$1
	shift
	endpoint $NS_A srv role=server addr=$ADDR_A port=$port "$@" enable=1 &&
		endpoint $NS_B cli role=client addr=$ADDR_A port=$port clients=16 count=10000000 \
			"$@" enable=1 &&
		key_is srv stats active 16 1200
}

# Each side in turn: its endpoint disables (closing 16 connections) while its
# device goes away, both started together, ROUNDS times; the first round in
# the CQs' softirq (the default poll context). In the server's second round
# both sides' CQs are busy-polled (busy_poll_us) in softirq mode
# (poll_context=softirq), so that the removal also stops pollers that may be
# polling, with the server's echoes on their fast path and the rest on
# cmecho's completion workqueue, which the release waits for; in the client's
# second round both sides' CQs are on the core's unbound workqueue.
net_setup || ktap_print_msg "network setup failed"
for side in server client; do
	ok=1
	for ((r = 0; r < ROUNDS; r++)); do
		knob=busy_poll_us=0
		[ $r = 1 ] && knob="busy_poll_us=200 poll_context=softirq"
		[ $r = 1 ] && [ $side = client ] && knob=poll_context=unbound_workqueue
		busy $((7500 + r)) $knob || { ktap_print_msg "$side round $r ($knob): not all connected"; ep_diag srv; }
		if [ $side = server ]; then
			ep=srv link=$RXE_A
		else
			ep=cli link=$RXE_B
		fi
		echo 0 >$CFS/$ep/enable &
		pd=$!
		rdma link del $link
		wait $pd
		rmdir $CFS/cli $CFS/srv || ok=0
		no_cmecho_cm_ids || ok=0
		links_up || { ktap_print_msg "rxe links not back"; ok=0; }
	done
	ktap_check "$side: device removed while the $side closes 16 connections, $ROUNDS times (the second: $knob): all returns, nothing left" \
		test $ok = 1
done

# The client's device goes away while its 16 connections connect: everything a
# sends is lost (silence_on), so no connect is answered and the client cannot
# leave connecting before its connect timeout (30 s). Its state is checked
# right before the removal; none of its connections was ever established, and
# it ends on the removal, not on that timeout.
endpoint $NS_A srv role=server addr=$ADDR_A port=7510 enable=1
silence_on
endpoint $NS_B cli role=client addr=$ADDR_A port=7510 clients=16 count=10000000 enable=1
state_is cli connecting 100
connecting=$?
rdma link del $RXE_B
wait_done cli 120
ep_diag cli
le=$(<$CFS/cli/last_error)
ktap_check "client's device removed while connecting: the client ends in error with a reason" \
	test $connecting = 0 -a "$(<$CFS/cli/state)" = error -a "$le" != none \
	-a "$(ep_get cli stats connections)" = 0 -a "${le%ETIMEDOUT*}" = "$le"
rmdir $CFS/cli
links_up

# A connect nobody answers (everything a sends is lost), then the device goes.
endpoint $NS_B cli role=client addr=$ADDR_A port=7510 count=10 enable=1
state_is cli connecting 100
connecting=$?
rdma link del $RXE_B
wait_done cli 120
ep_diag cli
ktap_check "client's device removed during an unanswered connect: error with a reason" \
	test $connecting = 0 -a "$(<$CFS/cli/state)" = error -a "$(<$CFS/cli/last_error)" != none
rmdir $CFS/cli
silence_off
links_up

rmdir $CFS/srv

# 64 live connections echoing, and the server's device goes away under them:
# every connection and the listener see DEVICE_REMOVAL at once, and each client
# connection, its echo unanswered, ends after its retries. Throttled while the
# 64 come up (lib.sh), with T=20 above the round trip. The server's CQs on the
# core's per-CPU workqueue (poll_context), the clients' in softirq.
throttle_on
endpoint $NS_A srv role=server mode=echo depth=1 size=64 addr=$ADDR_A port=7520 \
	ack_timeout=20 poll_context=workqueue enable=1
endpoint $NS_B cli role=client mode=echo depth=1 size=64 addr=$ADDR_A port=7520 clients=64 \
	count=10000000 retry_count=3 ack_timeout=20 connect_timeout_ms=300000 enable=1
key_is srv stats active 64 3000
all_up=$?
ktap_print_msg "srv: active $(ep_get srv stats active); cli: state $(<$CFS/cli/state), active $(ep_get cli stats active)"
rdma link del $RXE_A
wait_done cli 300 || ktap_print_msg "cli: not done or error after 300 s"
key_is srv stats active 0 600 || ktap_print_msg "srv: connections still active"
throttle_off
ep_diag srv
ep_diag cli
st_s=$(<$CFS/srv/state) st_c=$(<$CFS/cli/state)
le=$(<$CFS/srv/last_error)
ok=1
rmdir $CFS/cli $CFS/srv || ok=0
ktap_check "server's device removed under 64 live connections: both sides end and say why, nothing left" \
	test $all_up = 0 -a $ok = 1 -a "$st_s" = error -a "$st_c" = error -a "${le#*device was removed}" != "$le"

ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
