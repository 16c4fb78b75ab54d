#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Every connection knob reaches the QP or the route, as read back on both sides;
# ECE is negotiated end to end (accept, and strict reject); max_conns rejects
# excess requests with a reason and counts them.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 17
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

reset() {
	rmdir_endpoints
}

# Knobs: the client sets retry 5, RNR retry 3, min RNR timer 12, ToS 32, ack
# timeout 14; the server sets RNR retry 4, min RNR timer 20, ack timeout 15.
endpoint $NS_A srv role=server addr=$ADDR_A ack_timeout=15 min_rnr_timer=20 rnr_retry_count=4 enable=1
endpoint $NS_B cli role=client addr=$ADDR_A ack_timeout=14 min_rnr_timer=12 retry_count=5 \
	rnr_retry_count=3 tos=32 count=5 enable=1
wait_done cli 60
ktap_print_msg "client read-back: $(tr '\n' ' ' <$CFS/cli/qp_attrs)"
ktap_print_msg "server read-back: $(tr '\n' ' ' <$CFS/srv/qp_attrs)"
ktap_check "knobs: client pings done" test "$(<$CFS/cli/state)" = done
ktap_check "client QP: timeout 14, retry_cnt 5 (its own retry_count)" \
	test "$(ep_get cli qp_attrs timeout)" = 14 -a "$(ep_get cli qp_attrs retry_cnt)" = 5
ktap_check "client QP: rnr_retry 4 (the server's rnr_retry_count, sent in the REP)" \
	test "$(ep_get cli qp_attrs rnr_retry)" = 4
ktap_check "client QP: min_rnr_timer 12" test "$(ep_get cli qp_attrs min_rnr_timer)" = 12
ktap_check "client route: PacketLifeTime 13, traffic class 32 (tos)" \
	test "$(ep_get cli qp_attrs packet_life_time)" = 13 -a "$(ep_get cli qp_attrs traffic_class)" = 32
ktap_check "server QP: timeout 15, min_rnr_timer 20" \
	test "$(ep_get srv qp_attrs timeout)" = 15 -a "$(ep_get srv qp_attrs min_rnr_timer)" = 20
ktap_check "server QP: retry_cnt 5, rnr_retry 3 (the client's, sent in the REQ)" \
	test "$(ep_get srv qp_attrs retry_cnt)" = 5 -a "$(ep_get srv qp_attrs rnr_retry)" = 3

# ECE accepted: matching vendor ids; each side sees the other's.
reset
endpoint $NS_A srv role=server addr=$ADDR_A ece_vendor_id=0x1234 ece_attr_mod=0x7 ece_policy=strict enable=1
endpoint $NS_B cli role=client addr=$ADDR_A ece_vendor_id=0x1234 ece_attr_mod=0x5 count=5 enable=1
wait_done cli 60
ktap_print_msg "client remote_ece: $(tr '\n' ' ' <$CFS/cli/remote_ece); server remote_ece: $(tr '\n' ' ' <$CFS/srv/remote_ece)"
ktap_check "ECE accept: pings done" test "$(<$CFS/cli/state)" = done
ktap_check "ECE accept: the server saw the client's offer (0x1234/0x5)" \
	test "$(ep_get srv remote_ece vendor_id)" = 0x1234 -a "$(ep_get srv remote_ece attr_mod)" = 0x5
ktap_check "ECE accept: the client saw the server's answer (0x1234/0x7)" \
	test "$(ep_get cli remote_ece vendor_id)" = 0x1234 -a "$(ep_get cli remote_ece attr_mod)" = 0x7
# min_rnr_timer left unset: a server's QP advertises 0.32 ms (code 10, as RDS sets), not the
# CM's 655.36 ms (code 0), which a client's SEND that outruns the server's
# repost would wait out; the client's QP keeps the CM's.
ktap_print_msg "unset min_rnr_timer: server QP $(ep_get srv qp_attrs min_rnr_timer), client QP $(ep_get cli qp_attrs min_rnr_timer)"
ktap_check "min_rnr_timer unset: the server's QP gets 10 (0.32 ms), the client's keeps the CM's 0" \
	test "$(ep_get srv qp_attrs min_rnr_timer)" = 10 -a "$(ep_get cli qp_attrs min_rnr_timer)" = 0

# ECE strict reject: another vendor id.
endpoint $NS_B bad role=client addr=$ADDR_A ece_vendor_id=0x999 count=5 enable=1
wait_done bad 60
ep_diag bad
ktap_check "ECE strict: the client is rejected, state error" test "$(<$CFS/bad/state)" = error
ktap_check "ECE strict: the client's last_error says why" \
	grep -qi 'rejected by the peer: vendor option' $CFS/bad/last_error
ktap_check "ECE strict: the server counted the rejection" test "$(ep_get srv stats rejected)" = 1

# max_conns: two long-running clients fill it, a third is rejected.
reset
endpoint $NS_A srv role=server addr=$ADDR_A max_conns=2 enable=1
endpoint $NS_B c1 role=client addr=$ADDR_A count=10000000 enable=1
endpoint $NS_B c2 role=client addr=$ADDR_A count=10000000 enable=1
key_is srv stats active 2 3000
endpoint $NS_B c3 role=client addr=$ADDR_A count=5 enable=1
wait_done c3 60
ep_diag c3
ktap_check "max_conns 2: a third client is rejected" \
	test "$(<$CFS/c3/state)" = error -a "$(ep_get srv stats rejected)" = 1
ktap_check "max_conns 2: the server's last_error gives the reason" grep -q 'max_conns 2 reached' $CFS/srv/last_error

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
