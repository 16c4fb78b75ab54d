#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The ack timeout reaches the hardware on both sides: read back from the QPs
# (ib_query_qp) and the client's route, with it set (client 14, server 12) and
# unset (the RoCE defaults: PacketLifeTime 16, QP timeout 17). Then what it is for:
# with the path cut (netem 100 % loss on the client's egress), a small T is detected
# within seconds and a large one is not, with generous bounds and no timing claims.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 14
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# run SERVER_T CLIENT_T: one cmecho client connection against a cmecho server.
run() {
	rmdir_endpoints
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

# cut_run NAME T RETRY: a native echo client runs against the server `esrv`; once
# it has 20 echoes, its egress is cut (netem's loss goes from 0 to 100 %). Fails,
# with no cut, if it never got there.
cut_run() {
	endpoint $NS_B $1 role=client mode=echo addr=$ADDR_A port=7190 depth=1 size=64 \
		duration_ms=600000 ack_timeout=$2 retry_count=$3 enable=1 &&
		wait_for 1200 pings_over $1 20 &&
		state_is $1 running 1 &&
		tc -n $NS_B qdisc change dev vb root netem loss 100%
}
uncut() { tc -n $NS_B qdisc change dev vb root netem loss 0%; }

rmdir_endpoints
# The qdisc is in place, losing nothing, before any client starts: the cut
# changes its loss. Adding a qdisc while rxe transmits fails the QP at once
# (its SEND flushed, no retry), which is not the fault measured here.
tc -n $NS_B qdisc add dev vb root netem loss 0%
endpoint $NS_A esrv role=server mode=echo addr=$ADDR_A port=7190 depth=1 size=64 enable=1

# T=14, retry_count 2: (2+1) x 67 ms in theory; "within seconds" here. (A smaller T
# can fail on its own on this kernel under TCG: an ACK late by more than T's
# 4.096 us x 2^T on each try ends the connection before any cut.)
ktap_check "ack_timeout 14 retry_count 2: 20 echoes, then the path is cut" cut_run small 14 2
wait_done small 20
ep_diag small
ktap_check "... the client fails within 20 s" test "$(<$CFS/small/state)" = error
# (Or on its probe, if an echo was late enough for one to be in flight: the
# oldest request fails first.)
ktap_check "... on a SEND whose retries ran out" \
	grep -Eq "(SEND|probe) failed: transport retry counter exceeded" $CFS/small/last_error
us=$(ep_get small stats detect_us)
ktap_print_msg "detection as the module saw it: $us us (theory 201327 us); connection: $(<$CFS/small/connections)"
ktap_check "... and the module timed its detection (detect_us under 10 s, in stats and connections)" \
	eval '[ "$us" -gt 0 ] && [ "$us" -lt 10000000 ] && grep -q "detect_us $us" $CFS/small/connections'
uncut

# T=22, retry_count 0: 17 s per try in theory; still running after 6 s of cut.
ktap_check "ack_timeout 22 retry_count 0: 20 echoes, then the path is cut" cut_run large 22 0
nap 6
ktap_check "... not failed 6 s later" \
	eval '[ "$(<$CFS/large/state)" = running ] && [ "$(ep_get large stats detections)" = 0 ]'
uncut

unload_cmecho
tc -n $NS_B qdisc del dev vb root
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
