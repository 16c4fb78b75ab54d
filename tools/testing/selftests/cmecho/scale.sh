#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# 64 concurrent client connections against one server, all verified; the
# server's per-connection listing while they are up.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 6
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

endpoint $NS_A srv role=server mode=echo depth=1 size=64 addr=$ADDR_A enable=1
endpoint $NS_B many role=client mode=echo addr=$ADDR_A size=64 depth=1 count=100 clients=64 enable=1
wait_for 600 sh -c "[ \"\$(sed -n 's/^connections //p' $CFS/many/stats)\" = 64 ]"
ktap_print_msg "server connections listing: $(wc -l <$CFS/srv/connections) lines; first: $(head -1 $CFS/srv/connections)"
ktap_check "64 client connections established" test "$(ep_get many stats connections)" = 64
ktap_check "the server lists its connections with peer address and QP number" \
	grep -q "peer $ADDR_B:[0-9]* qp_num [0-9]" $CFS/srv/connections
wait_done many 300
ep_diag many
ktap_check "64 x 100 messages, all verified" \
	test "$(cat $CFS/many/state)" = done -a "$(ep_get many stats pings)" = 6400 \
	-a "$(ep_get many stats verify_errors)" = 0 -a "$(ep_get many stats errors)" = 0
ep_diag srv
ktap_check "the server saw 64 connections and no error" \
	test "$(ep_get srv stats connections)" = 64 -a "$(ep_get srv stats errors)" = 0
unload_cmecho
ktap_check "rdma res show cm_id: no id of cmecho left" no_cmecho_cm_ids
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
