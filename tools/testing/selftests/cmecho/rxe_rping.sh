#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The test harness itself: two namespaces over veth, rxe on each end, and the stock
# rping client validating 50 pings against the stock rping server across them.
. "$(dirname "$0")/lib.sh"

PORT=7174

ktap_print_header
ktap_set_plan 5
dmesg_mark
ktap_check "two netns over veth with an rxe link on each end" net_setup
ktap_check "rxe devices listed by rdma link" sh -c "rdma link show | grep -q $RXE_A && rdma link show | grep -q $RXE_B"

ip netns exec $NS_A timeout 120 rping -s -a $ADDR_A -p $PORT >/tmp/rping_s.log 2>&1 &
srv=$!
wait_for 600 cm_listening $PORT || ktap_print_msg "rping server not seen listening (rdma res)"
if ip netns exec $NS_B timeout 120 rping -c -a $ADDR_A -p $PORT -C 50 -S 64 -V >/tmp/rping_c.log 2>&1; then
	ktap_test_pass "stock rping -c -V -C 50 -S 64 against stock rping -s across netns"
else
	sed 's/^/# client: /' /tmp/rping_c.log | tail -5
	ktap_test_fail "stock rping -c -V -C 50 -S 64 against stock rping -s across netns"
fi
if wait $srv; then
	ktap_test_pass "stock rping -s exits cleanly after the client"
else
	sed 's/^/# server: /' /tmp/rping_s.log | tail -5
	ktap_test_fail "stock rping -s exits cleanly after the client"
fi
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
