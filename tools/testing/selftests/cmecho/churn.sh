#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Churn: two shells enabling and disabling one server at once while its port
# changes, attribute writes racing an enable, and clients removed while they
# connect or run, with their connection listings read meanwhile. Afterwards
# the server listens exactly once when enabled and not at all when disabled,
# nothing of cmecho is left, no kernel-log report, and a new client is served.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 8
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# The loops below wait and poll with builtins only (nap, state_is).

# cmecho_listeners: how many ids of cmecho listen (any namespace, any port).
cmecho_listeners() {
	rdma res show cm_id 2>/dev/null | grep 'state LISTEN' | grep -c 'comm \[cmecho\]'
}

# Two shells, each 100 times: a new port, enable, disable. Only builtins run in
# the loops, so the writes really overlap. Every write may fail (EBUSY), none
# may leave a second listener behind.
endpoint $NS_A race role=server addr=$ADDR_A port=7400
flip() {
	local i
	for ((i = 0; i < 100; i++)); do
		echo $((7400 + (i + $1) % 4)) >$CFS/race/port
		echo 1 >$CFS/race/enable
		echo 0 >$CFS/race/enable
	done 2>/dev/null
}
flip 0 &
p1=$!
flip 1 &
p2=$!
wait $p1 $p2
ktap_print_msg "race: after 2 x 100 enables: state $(<$CFS/race/state), last_error: $(<$CFS/race/last_error)"
n_off=$(cmecho_listeners)
echo 1 >$CFS/race/enable
n_on=$(cmecho_listeners)
echo 0 >$CFS/race/enable
n_end=$(cmecho_listeners)
ktap_print_msg "race: cmecho listeners: $n_off disabled, $n_on enabled, $n_end disabled again"
ktap_check "two shells enabling one server: one listener when enabled, none when disabled" \
	test "$n_off" = 0 -a "$n_on" = 1 -a "$n_end" = 0

# Attribute writes racing enables: each write either lands while the endpoint
# is idle or fails with EBUSY; the port read back while listening is the port
# the listener has. The writer writes until the enable loop is over ($W.stop),
# and counts: the writes refused with EBUSY, those that landed after its first
# EBUSY (so during the loop), other failures, and the enabled windows it ran
# into (refusals, then a write that lands). A pause after each disable lets
# writes land between the enables. Both sides must have done their part: some
# enables, and writes refused and landed all along the loop.
W=/tmp/churn_writer.$$
rm -f $W.stop $W.out
writer() {
	local i=0 landed=0 busy=0 other=0 windows=0 refused=0 e first=
	while [ ! -e $W.stop ]; do
		if echo $((7420 + i % 3)) 2>$W.err >$CFS/race/port; then
			[ $refused = 0 ] || windows=$((windows + 1))
			refused=0
			[ $busy = 0 ] || landed=$((landed + 1))
		else
			e=
			read -r e <$W.err
			if [[ $e == *"Device or resource busy"* ]]; then
				busy=$((busy + 1)) refused=1
			else
				other=$((other + 1))
				first=${first:-$e}
			fi
		fi
		i=$((i + 1))
	done
	echo "$landed $busy $other $windows ${first:-none}" >$W.out
}
writer &
pw=$!
ok=1 enables=0
for ((i = 0; i < 30; i++)); do
	if echo 1 >$CFS/race/enable 2>/dev/null; then
		enables=$((enables + 1))
		read -r port <$CFS/race/port
		cm_listening "$port" || { ktap_print_msg "enabled with port $port, not listening there"; ok=0; }
		echo 0 >$CFS/race/enable
	fi
	nap 0.1
done
: >$W.stop
wait $pw
landed='' busy='' other='' windows='' first=''
read -r landed busy other windows first <$W.out
rm -f $W.stop $W.out $W.err
ktap_print_msg "race: $enables of 30 enables; writes: ${busy:-none} refused (EBUSY) in ${windows:-no} enabled windows, ${landed:-none} landed after the first refusal, ${other:-no} other failures (first: ${first:-none})"
ktap_check "attribute writes racing enables: the port read back is the one listened on" \
	test $ok = 1 -a $enables -gt 0
ktap_check "attribute writes racing enables: refused (EBUSY) in most enabled windows, landed between them, no other failure" \
	test "${busy:-0}" -gt 0 -a "${landed:-0}" -gt 0 -a "$other" = 0 -a $((${windows:-0} * 2)) -ge $enables

# Clients removed while connecting or running, 4 connections each, while a
# reader lists the server's and the client's connections every 50 ms, in
# configfs and in debugfs.
debugfs_on
endpoint $NS_A srv role=server addr=$ADDR_A port=7410 enable=1
reader() {
	local x
	while [ -e $CFS/srv ]; do
		read -r -d '' x <$CFS/srv/connections
		read -r -d '' x <$CFS/c/connections
		read -r -d '' x <$DFS/srv/connections
		read -r -d '' x <$DFS/c/connections
		nap 0.05
	done 2>/dev/null
}
reader &
pr=$!
for ((i = 0; i < 10; i++)); do
	endpoint $NS_B c role=client addr=$ADDR_A port=7410 clients=4 count=10000000 enable=1
	# Removed at once (connecting) or a little later (running).
	[ $((i % 2)) = 1 ] && state_is c running 300
	rmdir $CFS/c
done
ktap_print_msg "srv: $(grep -E '^(connections|active|errors) ' $CFS/srv/stats | tr '\n' ' ')"
ktap_check "10 clients removed while connecting or running: all gone, from debugfs too" \
	test ! -e $CFS/c -a ! -e $DFS/c -a -e $DFS/srv/connections
echo 0 >$CFS/srv/enable
rmdir $CFS/srv
wait $pr
rmdir $CFS/race
ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

# A new client is served afterwards.
endpoint $NS_A srv2 role=server addr=$ADDR_A port=7411 enable=1
endpoint $NS_B cli role=client addr=$ADDR_A port=7411 count=10 enable=1
wait_done cli 180
ep_diag cli
ktap_check "afterwards, a new client is served" test "$(<$CFS/cli/state)" = done

unload_cmecho
ktap_check "rmmod after the churn" test ! -d $CFS
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
