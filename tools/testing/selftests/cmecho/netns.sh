#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# An endpoint lives in the network namespace of the process that created it.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 5
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

endpoint $NS_A srv role=server addr=$ADDR_A enable=1
endpoint $NS_B cli role=client addr=$ADDR_A count=5
ns_a=$(ip netns exec $NS_A readlink /proc/self/ns/net)
ns_b=$(ip netns exec $NS_B readlink /proc/self/ns/net)
ktap_print_msg "srv netns $(cat $CFS/srv/netns) (ns a: $ns_a), cli netns $(cat $CFS/cli/netns) (ns b: $ns_b)"
ktap_test_result "server made in netns a says netns a" test "$(cat $CFS/srv/netns)" = "$ns_a"
ktap_test_result "client made in netns b says netns b" test "$(cat $CFS/cli/netns)" = "$ns_b"
echo 1 >$CFS/cli/enable
wait_done cli 60
ktap_test_result "client in b reaches the server in a" test "$(cat $CFS/cli/state)" = done

# An endpoint made in the initial namespace cannot use namespace a's address.
mkdir $CFS/init
echo server >$CFS/init/role
echo $ADDR_A >$CFS/init/addr
err=$( (echo 1 >$CFS/init/enable) 2>&1)
ktap_print_msg "init-netns server on $ADDR_A: ${err:-success}; $(cat $CFS/init/last_error)"
ktap_test_result "an endpoint of the initial netns cannot listen on netns a's address" \
	test "$(cat $CFS/init/enable)" = 0 -a "$(readlink /proc/self/ns/net)" = "$(cat $CFS/init/netns)"
unload_cmecho
net_cleanup
ktap_test_result "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
