#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# One of the two guests of scripts/two-hosts: `two-hosts-guest.sh server OUT GEN`
# or `two-hosts-guest.sh client OUT`. The guests share OUT (a host directory) and
# a link (each QEMU's second NIC, joined by UDP on the host), with an rxe device
# on each end: 10.78.0.1 is the server, 10.78.0.2 the client.
#
# The server loads cmecho, serves a cmecho native echo server (port 7301), a
# cmecho rping server (7303) and the stock rping server (7302), writes
# OUT/ready.GEN, and waits for OUT/done. scripts/two-hosts kills the first
# server's QEMU while the client runs, and boots a second (GEN 2).
#
# The client prints KTAP: interop both ways; native echo clients with ack timeouts
# 14, 16 and 18 running when it asks for the kill (OUT/kill), each failing on
# its own and its detection time against (retry_count + 1) x 4.096 us x 2^T;
# then, once the second server is up, one of them enabled again, running.
# TWO_HOSTS_LATE_PCT bounds how late a detection may be (default 120: within
# 20 % of theory).
set -u
role=$1 out=$2 gen=${3:-1}
# How late a detection may be, in % of theory (scripts/two-hosts: 120 on the
# bench kernel; more on the debug kernel, whose detectors slow rxe's retries).
late_pct=${TWO_HOSTS_LATE_PCT:-120}
SELFTEST_DIR=${0%/*}/../tools/testing/selftests/cmecho
. "$SELFTEST_DIR/lib.sh"
ADDR_S=10.78.0.1
ADDR_C=10.78.0.2

# The link: the NIC scripts/two-hosts gave this guest's role its MAC address.
link_up() {
	local mac=$1 addr=$2 d a dev=
	for d in /sys/class/net/*; do
		read -r a <"$d/address"
		[ "$a" = "$mac" ] && dev=${d##*/}
	done
	[ -n "$dev" ] || { echo "no NIC with MAC $mac"; return 1; }
	module_loaded rdma_rxe || modprobe rdma_rxe || return 1
	ip addr add "$addr/24" dev "$dev" && ip link set "$dev" up &&
		rdma link add rxe_h type rxe netdev "$dev"
}

# wait_file FILE SECONDS: waits for FILE (written by the other guest or the host).
wait_file() {
	local end=$((SECONDS + $2))
	until [ -e "$1" ]; do
		[ $SECONDS -lt $end ] || return 1
		nap 0.2
	done
}

if [ "$role" = server ]; then
	link_up 52:54:00:78:00:01 $ADDR_S || exit 1
	load_cmecho
	# Depth 8 for depth-1 clients: a server of depth 1 has one receive, reposted
	# only once its echo is acked, and a client's next message that comes first
	# gets an RNR NAK and waits the server's min RNR timer (its default, code 0,
	# is 655 ms). A kill during that wait adds it to the detection, which is then
	# not the ack timeout's (seen: T=14 detected in 806 ms).
	endpoint "" esrv role=server mode=echo addr=$ADDR_S port=7301 depth=8 size=64 enable=1 || exit 1
	endpoint "" rsrv role=server addr=$ADDR_S port=7303 enable=1 || exit 1
	timeout 1200 rping -s -P -a $ADDR_S -p 7302 >/dev/null 2>&1 &
	wait_for 600 cm_listening 7302 || echo "stock rping server not seen listening"
	echo "server $gen up" >"$out/ready.$gen"
	wait_file "$out/done" 1200
	kill %1 2>/dev/null
	unload_cmecho
	check_dmesg_clean && echo "server $gen: kernel log clean"
	exit 0
fi

ktap_print_header
ktap_set_plan 11
dmesg_mark
link_up 52:54:00:78:00:02 $ADDR_C || ktap_print_msg "link setup failed"
load_cmecho
ktap_check "the server guest is up, and answers ping over the link" \
	eval 'wait_file "$out/ready.1" 900 && wait_for 600 ping -c 1 -W 1 $ADDR_S'

# Interop, both ways, and cmecho with itself, across the link.
endpoint "" rcli role=client addr=$ADDR_S port=7302 count=20 size=64 enable=1
wait_done rcli 120
ktap_check "cmecho rping client -> stock rping server on the other host: 20 pings" \
	eval '[ "$(<$CFS/rcli/state)" = done ] && [ "$(ep_get rcli stats pings)" = 20 ]'
ktap_check "stock rping client -> cmecho rping server on the other host: 20 verified pings" \
	timeout 120 rping -c -a $ADDR_S -p 7303 -C 20 -S 64 -V
endpoint "" ecli role=client mode=echo addr=$ADDR_S port=7301 count=50 size=64 depth=1 enable=1
wait_done ecli 120
ktap_check "cmecho echo client -> cmecho echo server on the other host: 50 verified echoes" \
	eval '[ "$(<$CFS/ecli/state)" = done ] && [ "$(ep_get ecli stats pings)" = 50 ] && [ "$(ep_get ecli stats verify_errors)" = 0 ]'
ktap_print_msg "ecli: rtt_p50_us $(ep_get ecli stats rtt_p50_us) rtt_p99_us $(ep_get ecli stats rtt_p99_us)"
rmdir_endpoints

# Clients that run until their peer dies: T and retry_count each.
kills="14:2 16:2 18:1"
all_up=1
for tr in $kills; do
	endpoint "" k${tr%:*} role=client mode=echo addr=$ADDR_S port=7301 depth=1 size=64 \
		duration_ms=3600000 ack_timeout=${tr%:*} retry_count=${tr#*:} enable=1 || all_up=0
done
for tr in $kills; do
	wait_for 1200 pings_over k${tr%:*} 20 && state_is k${tr%:*} running 1 || all_up=0
done
ktap_check "ack timeouts 14, 16, 18: three clients running against the server" test $all_up = 1
# rxe's counters around the kill: what the retries sent, for a detection
# that misses its theory.
ktap_print_msg "rxe before the kill: $(rdma statistic show link rxe_h/1 2>&1 | tr -s ' \n' ' ')"
echo "kill" >"$out/kill"
ktap_print_msg "asked for the server guest to be killed"
wait_file "$out/killed" 120 || ktap_print_msg "the host did not say it killed the server"
for tr in $kills; do
	wait_done k${tr%:*} 120
done
ktap_print_msg "rxe after the detections: $(rdma statistic show link rxe_h/1 2>&1 | tr -s ' \n' ' ')"
# Each detection against theory: from 80 % to late_pct %.
for tr in $kills; do
	t=${tr%:*} r=${tr#*:} ep=k${tr%:*}
	us=$(ep_get $ep stats detect_us)
	theory=$(((r + 1) * 4096 * (1 << t) / 1000))
	ktap_print_msg "$ep: $(<$CFS/$ep/state); qp timeout $(ep_get $ep qp_attrs timeout) retry_cnt $(ep_get $ep qp_attrs retry_cnt); detect_us $us, theory $theory us ($(<$CFS/$ep/last_error))"
	echo "$t $r $us $theory" >>"$out/detections"
	ktap_check "T=$t retry_count=$r: the dead host detected in ${us:-?} us, 80 to $late_pct % of $theory us" \
		eval '[ "$(<$CFS/$ep/state)" = error ] && [[ $us =~ ^[0-9]+$ ]] &&
			[ $((us * 100)) -ge $((theory * 80)) ] && [ $((us * 100)) -le $((theory * late_pct)) ]'
done

# The server back: the same endpoint, enabled again, runs against it.
ktap_check "the server guest is up again" wait_file "$out/ready.2" 900
echo 0 >$CFS/k14/enable
echo 1 >$CFS/k14/enable
ktap_check "T=14 client enabled again: connected to the new server, echoing" \
	eval 'wait_for 1200 pings_over k14 20 && state_is k14 running 1'
echo 0 >$CFS/k14/enable
echo "done" >"$out/done"

unload_cmecho
ktap_check "no BUG/WARNING/Oops in the client's kernel log" check_dmesg_clean
ktap_finished
