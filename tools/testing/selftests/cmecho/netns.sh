#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# An endpoint lives in the network namespace of the process that created it.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 10
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

endpoint $NS_A srv role=server addr=$ADDR_A enable=1
endpoint $NS_B cli role=client addr=$ADDR_A count=5
ns_a=$(ip netns exec $NS_A readlink /proc/self/ns/net)
ns_b=$(ip netns exec $NS_B readlink /proc/self/ns/net)
ktap_print_msg "srv netns $(<$CFS/srv/netns) (ns a: $ns_a), cli netns $(<$CFS/cli/netns) (ns b: $ns_b)"
ktap_check "server made in netns a says netns a" test "$(<$CFS/srv/netns)" = "$ns_a"
ktap_check "client made in netns b says netns b" test "$(<$CFS/cli/netns)" = "$ns_b"
echo 1 >$CFS/cli/enable
wait_done cli 60
ktap_check "client in b reaches the server in a" test "$(<$CFS/cli/state)" = done

# An endpoint made in the initial namespace cannot use namespace a's address.
mkdir $CFS/init
echo server >$CFS/init/role
echo $ADDR_A >$CFS/init/addr
err=$( (echo 1 >$CFS/init/enable) 2>&1)
ktap_print_msg "init-netns server on $ADDR_A: ${err:-success}; $(<$CFS/init/last_error)"
ktap_check "an endpoint of the initial netns cannot listen on netns a's address" \
	test "$(<$CFS/init/enable)" = 0 -a "$(readlink /proc/self/ns/net)" = "$(<$CFS/init/netns)"
rmdir $CFS/init

# Deleting namespace a while its server has a live connection: the endpoint (and
# each CM id in it) holds the namespace, so the server keeps serving; rmdir then
# releases the last reference, the namespace is destroyed, and with it the veth
# pair: vb vanishing from namespace b proves no reference leaked.
endpoint $NS_B live role=client addr=$ADDR_A count=10000000 enable=1
key_is srv stats active 1 3000
ip netns del $NS_A
# Served on: 100 more pings after the deletion (a namespace torn down under the
# connection would end it).
p1=$(ep_get live stats pings)
wait_for 1800 sh -c "[ \"\$(sed -n 's/^pings //p' $CFS/live/stats)\" -ge $((${p1:-0} + 100)) ]"
p2=$(ep_get live stats pings)
ktap_print_msg "after ip netns del: srv $(<$CFS/srv/state), client pings $p1 -> $p2"
ktap_check "after ip netns del, the server in it keeps serving" \
	test "$(<$CFS/srv/state)" = listening -a "$p2" -ge $((${p1:-0} + 100))
ktap_check "the namespace is kept alive: vb still exists in b" ip -n $NS_B link show vb
timeout 60 rmdir $CFS/srv
ktap_check "rmdir of the server in the deleted namespace returns" test $? -eq 0
wait_for 1800 sh -c "! ip -n $NS_B link show vb"
ktap_check "then the namespace is destroyed (vb gone from b): no reference leaked" \
	sh -c "! ip -n $NS_B link show vb"
wait_done live 60
ep_diag live
unload_cmecho
ktap_check "rdma res show cm_id: no id of cmecho left" no_cmecho_cm_ids
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
