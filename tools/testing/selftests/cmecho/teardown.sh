#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Teardown with live connections never hangs and leaks no CM id: rmmod while
# endpoints exist, rmdir of a pinging client, and `rdma link del` of the server's
# device under live connections, each bounded by a timeout.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 10
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

endpoint $NS_A srv role=server addr=$ADDR_A enable=1
ip netns exec $NS_B timeout 300 rping -c -a $ADDR_A -C 1000000 -S 64 >/dev/null 2>&1 &
rp=$!
endpoint $NS_B cli role=client addr=$ADDR_A count=10000000 size=64 enable=1
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
