#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# cmecho's echo service against the stock rping of rdma-core, both ways, and
# against itself with four clients at once, across two namespaces over rxe;
# the client against a stock server with its CQ busy-polled (busy_poll_us),
# the server with its CQs in softirq (poll_context), the failing client's on
# the core's unbound workqueue and the four clients' on its per-CPU one.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 11
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# The server's CQs in softirq (poll_context): the rping protocol has no fast
# path, so each of its completions goes, in order, to cmecho's workqueue.
endpoint $NS_A srv role=server addr=$ADDR_A port=7174 poll_context=softirq enable=1
ktap_check "cmecho server listening" test "$(<$CFS/srv/state)" = listening

for size in 64 4096; do
	before=$(ep_get srv stats pings)
	if ip netns exec $NS_B timeout 180 rping -c -a $ADDR_A -C 100 -S $size -V >/tmp/rping.log 2>&1; then
		after=$(ep_get srv stats pings)
		ktap_print_msg "server counted $((after - before)) pings"
		ktap_check "stock rping -c -V -C 100 -S $size against cmecho server" test $((after - before)) -eq 100
	else
		tail -3 /tmp/rping.log | sed 's/^/# rping: /'
		ep_diag srv
		ktap_test_fail "stock rping -c -V -C 100 -S $size against cmecho server"
	fi
done

ip netns exec $NS_A timeout 120 rping -s -a $ADDR_A -p 7175 -S 1024 >/tmp/rping_s.log 2>&1 &
rs=$!
wait_for 600 cm_listening 7175
# The cmecho client's CQ busy-polled (busy_poll_us): the same protocol.
endpoint $NS_B cli role=client addr=$ADDR_A port=7175 count=100 size=1024 busy_poll_us=200 \
	enable=1
wait_done cli 120
ep_diag cli
ktap_check "cmecho client, busy-polled, against stock rping -s: 100 pings validated" \
	test "$(<$CFS/cli/state)" = done -a "$(ep_get cli stats pings)" = 100 -a "$(ep_get cli stats errors)" = 0
wait $rs
ktap_check "stock rping -s exits cleanly after the cmecho client" test $? -eq 0
echo 0 >$CFS/cli/enable

# A failed fast registration. rxe never fails one on its own: fail_call makes
# the next call of rxe_reg_fast_mr return EINVAL, and rxe completes cmecho's
# unsignaled IB_WR_REG_MR with an error, flushing what follows. The client
# must end in error and say which request failed (on rxe the registration is
# itself reported as flushed, and a flushed RECV may come first), not wait for
# an answer that cannot come.
reg_failure() {
	local rs hits le st
	ip netns exec $NS_A timeout 120 rping -s -a $ADDR_A -p 7176 -S 1024 >/tmp/rping_s.log 2>&1 &
	rs=$!
	wait_for 600 cm_listening 7176
	fail_call_on rxe_reg_fast_mr -22 1 || return 1
	endpoint $NS_B reg role=client addr=$ADDR_A port=7176 count=100 size=1024 \
		poll_context=unbound_workqueue enable=1
	wait_done reg 60
	hits=$(fail_call_hits)
	fail_call_off
	ep_diag reg
	le=$(<$CFS/reg/last_error) st=$(<$CFS/reg/state)
	ktap_print_msg "registrations failed: $hits; client: $st, $le"
	rmdir $CFS/reg
	kill $rs 2>/dev/null
	wait $rs
	[ "$hits" = 1 ] && [ "$st" = error ] && [ "${le#* failed: }" != "$le" ]
}
ktap_check "a failed memory registration ends the client in error, with its reason" reg_failure

# All four up at once: a count they cannot finish keeps them connected until
# enable=0 closes them (state idle, stats kept); then 100 pings each. Their
# CQs on the core's per-CPU workqueue (poll_context).
endpoint $NS_B four role=client addr=$ADDR_A count=10000000 size=512 clients=4 \
	poll_context=workqueue enable=1
key_is srv stats active 4 3000
all_up=$?
ktap_print_msg "server active $(ep_get srv stats active); client $(<$CFS/four/state), connections $(ep_get four stats connections)"
ktap_check "4 cmecho clients active at once on the cmecho server" \
	test $all_up -eq 0 -a "$(ep_get four stats connections)" = 4
echo 0 >$CFS/four/enable
ep_diag four
ktap_check "enable=0 stops the 4 clients: idle, none active, pings validated, no error" \
	test "$(<$CFS/four/state)" = idle -a "$(ep_get four stats active)" = 0 \
	-a "$(ep_get four stats pings)" -gt 0 -a "$(ep_get four stats errors)" = 0
echo 100 >$CFS/four/count
echo 1 >$CFS/four/enable
wait_done four 120
ep_diag four
ktap_check "4 cmecho clients at once against the cmecho server: 400 pings validated" \
	test "$(<$CFS/four/state)" = done -a "$(ep_get four stats pings)" = 400 -a \
	"$(ep_get four stats errors)" = 0 -a "$(ep_get four stats connections)" = 4
ktap_check "cmecho server counted no errors" test "$(ep_get srv stats errors)" = 0

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
