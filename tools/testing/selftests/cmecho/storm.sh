#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A reconnect storm: 64 clients enabled at once against one server, with no
# netem throttle and the default connect settings (as after a switch or a peer
# restart), in echo mode (64 B x 1 and 4 KiB x 4) and in rping mode. Every
# client must reach ESTABLISHED and finish its messages, and the server must
# have taken each of them on once. Then 16 stock rping clients at once against
# a server that admits 8: the 8 admitted finish their 200 pings, the 8 others
# are refused (the 200 keep the first 8 connected while the others come: with
# 20, one run had 15 accepted one after the other). cmecho's own clients send
# few messages (20 a connection, rping 10): the storm is the handshakes; each
# connection's echoes are verified, and 200 a connection took 9 of CI's
# minutes on a slow day without testing more of them.
# 4 KiB x 4 is the costly one: its traffic keeps rxe's workers and the
# completion work busy on both CPUs, which the CM's own ib_cm workqueue needs
# for the handshakes; an endpoint's clients start their messages only once
# all are connected. It runs with ack_timeout 20 (4.3 s): under that load on
# the debug kernel rxe's ACKs come later than the default 0.54 s, rxe
# retransmits (hw_counters completer_retry_err and duplicate_request in the
# thousands), and a retransmitted multi-packet SEND now and then fails its
# QP ("remote invalid request", "local QP operation error"), a matter of
# rxe's retransmission, not of the handshakes this tests.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 7
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# cm_counters: the CM's retransmissions and duplicates so far, per device and
# message, those not zero (what a slow or lost handshake leaves behind); rxe's
# error and retry counters not zero; the softnet backlog's drops (column 2).
cm_counters() {
	local f v out=
	for f in /sys/class/infiniband/rxe_?/ports/1/cm_tx_retries/* /sys/class/infiniband/rxe_?/ports/1/cm_rx_duplicates/*; do
		[ -r "$f" ] || continue
		v=$(<"$f")
		[ "$v" != 0 ] && out+=" ${f#/sys/class/infiniband/}=$v"
	done
	ktap_print_msg "CM retries and duplicates:${out:- none}"
	out=
	for f in /sys/class/infiniband/rxe_?/ports/1/hw_counters/*; do
		[ -r "$f" ] || continue
		case $f in */sent_pkts | */rcvd_pkts | */rdma_sends | */rdma_recvs) continue ;; esac
		v=$(<"$f")
		[ "$v" != 0 ] && out+=" ${f#/sys/class/infiniband/}=$v"
	done
	ktap_print_msg "rxe counters:${out:- none}"
	out=
	while read -r f v _; do
		out+=" $((16#$v))"
	done </proc/net/softnet_stat
	ktap_print_msg "softnet backlog drops per CPU:$out"
}

# storm NAME MODE SIZE DEPTH PORT COUNT [KNOB=VALUE...]: 64 clients of MODE, SIZE x DEPTH,
# COUNT messages each (a reconnect storm of connections that then do some
# work, not 64 unbounded streams saturating two emulated CPUs), enabled at
# once; true when
# the client finishes within 240 s with all 64 established and none failed,
# every message verified, and the server took on exactly 64, none of them past
# its accept deadline, with no error.
storm() {
	local name=$1 mode=$2 size=$3 depth=$4 port=$5 count=$6 t0 ok=1
	shift 6
	endpoint $NS_A s$name role=server mode=$mode size=$size depth=$depth addr=$ADDR_A port=$port "$@" enable=1
	t0=$SECONDS
	endpoint $NS_B c$name role=client mode=$mode addr=$ADDR_A port=$port size=$size depth=$depth \
		count=$count clients=64 "$@" enable=1
	wait_done c$name 240 && ok=0
	ktap_print_msg "$name: $((SECONDS - t0)) s; client $(<$CFS/c$name/state), connections $(ep_get c$name stats connections), connect_failed $(ep_get c$name stats connect_failed), pings $(ep_get c$name stats pings), errors $(ep_get c$name stats errors); server took on $(ep_get s$name stats connections), errors $(ep_get s$name stats errors), accept_timeouts $(ep_get s$name stats accept_timeouts)"
	[ $ok -eq 0 ] && [ "$(<$CFS/c$name/state)" = done ] &&
		[ "$(ep_get c$name stats connections)" = 64 ] &&
		[ "$(ep_get c$name stats connect_failed)" = 0 ] &&
		[ "$(ep_get c$name stats pings)" = $((64 * count)) ] &&
		[ "$(ep_get c$name stats errors)" = 0 ] &&
		[ "$(ep_get s$name stats connections)" = 64 ] &&
		[ "$(ep_get s$name stats accept_timeouts)" = 0 ] &&
		[ "$(ep_get s$name stats errors)" = 0 ]
	ok=$?
	[ $ok -eq 0 ] || { ep_diag c$name; ep_diag s$name; }
	cm_counters
	echo 0 >$CFS/c$name/enable
	echo 0 >$CFS/s$name/enable
	rmdir $CFS/c$name $CFS/s$name
	return $ok
}

ktap_check "echo 64 B x 1: 64 clients at once, all established, each taken on once" storm e64 echo 64 1 7701 20
ktap_check "echo 4 KiB x 4: 64 clients at once, all established, each taken on once" storm e4k echo 4096 4 7702 20 ack_timeout=20
ktap_check "rping 64 B: 64 clients at once, all established, each taken on once" storm rp rping 64 1 7703 10

# 16 stock rping clients at once against a server that admits 8.
endpoint $NS_A rp8 role=server mode=rping addr=$ADDR_A port=7704 max_conns=8 enable=1
pids=()
for i in $(seq 16); do
	ip netns exec $NS_B timeout 180 rping -c -a $ADDR_A -p 7704 -V -C 200 -S 64 >/tmp/storm_rp$i.log 2>&1 &
	pids+=($!)
done
good=0 bad=0 rcs=
for p in "${pids[@]}"; do
	wait $p
	rc=$?
	rcs+=" $rc"
	if [ $rc -eq 0 ]; then good=$((good + 1)); else bad=$((bad + 1)); fi
done
ktap_print_msg "stock rping x 16, max_conns 8: exit codes$rcs; server accepted $(ep_get rp8 stats connections), rejected $(ep_get rp8 stats rejected), pings $(ep_get rp8 stats pings), errors $(ep_get rp8 stats errors)"
[ $good -eq 8 ] || { ep_diag rp8; tail -n 3 /tmp/storm_rp*.log | sed 's/^/# /'; }
ktap_check "stock rping x 16 against max_conns 8: 8 finish 200 pings each" \
	test $good -eq 8 -a "$(ep_get rp8 stats pings)" = 1600
ktap_check "... and the other 8 are refused" \
	test $bad -eq 8 -a "$(ep_get rp8 stats rejected)" = 8
echo 0 >$CFS/rp8/enable
rmdir $CFS/rp8

rmdir_endpoints
unload_cmecho
ktap_check "rdma res show cm_id: no id of cmecho left" no_cmecho_cm_ids
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
