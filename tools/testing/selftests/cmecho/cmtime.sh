#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The cmtime sample, built from the same rdma layer sources as cmecho.ko, times
# every CM step over 20 connections to a cmecho server.
. "$(dirname "$0")/lib.sh"

CMTIME_KO=${CMTIME_KO:-$(dirname "$CMECHO_KO")/cmecho_cmtime.ko}
STEPS="create_id resolve_addr resolve_route create_qp connect disconnect destroy"
ktap_print_header
ktap_set_plan 5
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"
endpoint $NS_A srv role=server addr=$ADDR_A enable=1

ip netns exec $NS_B timeout 300 insmod "$CMTIME_KO" addr=$ADDR_A port=7174 conns=20
ktap_check "insmod cmecho_cmtime conns=20 in netns b" test $? -eq 0
dmesg_since | grep 'cmecho_cmtime:' | sed 's/^\[[^]]*\] /# /'
ktap_check "20 of 20 connections ok" dmesg_since_has "cmecho_cmtime: 20 of 20 connections to $ADDR_A:7174 ok"
ok=1
for s in $STEPS; do
	line=$(dmesg_since | grep "cmecho_cmtime: step $s min ")
	set -- $(echo "$line" | sed 's/.*min \([0-9]*\) avg \([0-9]*\) max \([0-9]*\) us/\1 \2 \3/')
	if [ $# -ne 3 ] || [ "$1" -gt "$2" ] || [ "$2" -gt "$3" ]; then
		ktap_print_msg "step $s: bad report '$line'"
		ok=0
	fi
done
ktap_check "every step reported with min <= avg <= max" test $ok = 1
rmmod cmecho_cmtime
ktap_check "the server accepted 20 connections" test "$(ep_get srv stats connections)" = 20
unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
