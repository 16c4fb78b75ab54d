#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The ack timeout reaches the hardware on both sides: read back from the QPs
# (ib_query_qp) and the client's route, with it set (client 14, server 12) and
# unset (the RoCE defaults: PacketLifeTime 16, QP timeout 17).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 8
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# run SERVER_T CLIENT_T: one cmecho client connection against a cmecho server.
run() {
	for d in "$CFS"/*/; do [ -d "$d" ] && rmdir "$d"; done
	endpoint $NS_A srv role=server addr=$ADDR_A ack_timeout=$1 enable=1 &&
		endpoint $NS_B cli role=client addr=$ADDR_A ack_timeout=$2 count=5 enable=1 &&
		wait_done cli 60
	ktap_print_msg "client read-back: $(tr '\n' ' ' <$CFS/cli/qp_attrs)"
	ktap_print_msg "server read-back: $(tr '\n' ' ' <$CFS/srv/qp_attrs)"
}

run 12 14
ktap_check "ack_timeout 14: client QP timeout 14" test "$(ep_get cli qp_attrs timeout)" = 14
ktap_check "ack_timeout 14: client route PacketLifeTime 13" test "$(ep_get cli qp_attrs packet_life_time)" = 13
ktap_check "ack_timeout 12: server QP timeout 12 (set on the new id before accept)" \
	test "$(ep_get srv qp_attrs timeout)" = 12
ktap_check "pings completed with the timeouts set" test "$(<$CFS/cli/state)" = done

run unset unset
ktap_check "unset: client QP timeout 17 (RoCE default)" test "$(ep_get cli qp_attrs timeout)" = 17
ktap_check "unset: client route PacketLifeTime 16 (RoCE default)" test "$(ep_get cli qp_attrs packet_life_time)" = 16
ktap_check "unset: server QP timeout 17 (RoCE default)" test "$(ep_get srv qp_attrs timeout)" = 17

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
