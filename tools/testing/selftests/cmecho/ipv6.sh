#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# IPv6: the rping protocol and native echo over global IPv6 addresses, and a
# client connecting to the server's link-local address with a %scope of its
# own namespace, every echo verified; a client asking for more than the server
# accepts is rejected with the reason.
. "$(dirname "$0")/lib.sh"

V6_A=fd00:77::1
V6_B=fd00:77::2

ktap_print_header
ktap_set_plan 7
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"
# nodad: the addresses are usable at once, not tentative for a second or two.
ip -n $NS_A addr add $V6_A/64 dev va nodad
ip -n $NS_B addr add $V6_B/64 dev vb nodad
wait_for 600 ip netns exec $NS_B ping -6 -c 1 -W 1 $V6_A ||
	ktap_print_msg "$V6_A not reachable from $NS_B"

# run EP ARGS...: a client in b with ARGS; true when it ends done, all verified.
run() {
	local ep=$1
	shift
	endpoint $NS_B $ep role=client "$@" enable=1
	wait_done $ep 180
	ep_diag $ep
	[ "$(<$CFS/$ep/state)" = done ] && [ "$(ep_get $ep stats verify_errors)" = 0 ] &&
		[ "$(ep_get $ep stats errors)" = 0 ]
}

endpoint $NS_A rp role=server addr=$V6_A port=7600 enable=1
ktap_check "rping over IPv6: 20 pings" run c1 addr=$V6_A port=7600 count=20
endpoint $NS_A ec role=server mode=echo depth=8 size=65536 addr=$V6_A port=7601 enable=1
ktap_check "native echo over IPv6, 64 bytes, depth 8: 50 echoes verified" \
	run c2 mode=echo addr=$V6_A port=7601 size=64 depth=8 count=50
ktap_check "native echo over IPv6, 65536 bytes, depth 1: 10 echoes verified" \
	run c3 mode=echo addr=$V6_A port=7601 size=65536 depth=1 count=10

# The server's limits come back in its reject over IPv6 too.
endpoint $NS_A small role=server mode=echo size=64 depth=1 addr=$V6_A port=7603 enable=1
ktap_check "over IPv6, size 256 against a server of 64 bytes: rejected, the reason named" \
	refused big6 $V6_A 7603 256 1 "size 256 above the server's 64"
ktap_check "over IPv6, depth 8 against a server of depth 1: rejected, the reason named" \
	refused deep6 $V6_A 7603 64 8 "depth 8 above the server's 1"

# The server's link-local address, scoped with the client's interface.
ll=$(ip -n $NS_A -6 addr show dev va scope link | sed -n 's/.*inet6 \([^/]*\).*/\1/p')
endpoint $NS_A ll role=server mode=echo addr="$ll%va" port=7602 enable=1
ktap_check "native echo to $ll%vb (link-local, scoped in the client's namespace)" \
	run c4 mode=echo addr="$ll%vb" port=7602 count=20

unload_cmecho
# The network goes on to the next program as net_setup made it.
ip -n $NS_A addr del $V6_A/64 dev va
ip -n $NS_B addr del $V6_B/64 dev vb
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
