#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The guest side of `make demo`: runs inside the VM as root.
set -u
cd "$(dirname "$0")/.." || exit 1
SELFTEST_DIR=$PWD/tools/testing/selftests/cmecho
# shellcheck source=../tools/testing/selftests/cmecho/lib.sh
. "$SELFTEST_DIR/lib.sh"

step() { printf '\n== %s\n' "$*"; }
row() { printf '  %-30s %s\n' "$1" "$2"; }
fail=0

step "1. load cmecho.ko"
load_cmecho || exit 1
row "kernel log" "$(dmesg | grep 'cmecho: version' | tail -1 | sed 's/^\[[^]]*\] //')"
row "/sys/kernel/config/cmecho" "version $(cat $CFS/version)"

step "2. two hosts: two netns ($ADDR_A, $ADDR_B) over veth, rxe on each end"
net_setup || { echo "network setup failed"; exit 1; }
row "namespaces" "$NS_A $NS_B"
rdma link show | sed 's/^/  /'

step "3. a cmecho server in $NS_A, made with mkdir/echo in configfs"
endpoint $NS_A srv role=server addr=$ADDR_A ack_timeout=12 enable=1 || exit 1
row "srv: role addr port" "$(cat $CFS/srv/role) $(cat $CFS/srv/addr) $(cat $CFS/srv/port)"
row "srv: ack_timeout state netns" "$(cat $CFS/srv/ack_timeout) $(cat $CFS/srv/state) $(cat $CFS/srv/netns)"

step "4. cmecho clients in $NS_B: 200 pings of 4 KiB, ack_timeout unset vs 14"
printf '  %-12s %-8s %-6s %-8s %-8s %-10s %-10s %-10s\n' ack_timeout QP-tmo PLT state pings rtt_min_us rtt_avg_us rtt_max_us
for t in unset 14; do
	ep=cli_$t
	endpoint $NS_B $ep role=client addr=$ADDR_A ack_timeout=$t count=200 size=4096 enable=1 || exit 1
	wait_done $ep 120
	printf '  %-12s %-8s %-6s %-8s %-8s %-10s %-10s %-10s\n' "$t" \
		"$(ep_get $ep qp_attrs timeout)" "$(ep_get $ep qp_attrs packet_life_time)" \
		"$(cat $CFS/$ep/state)" "$(ep_get $ep stats pings)" "$(ep_get $ep stats rtt_min_us)" \
		"$(ep_get $ep stats rtt_avg_us)" "$(ep_get $ep stats rtt_max_us)"
	[ "$(cat $CFS/$ep/state)" = done ] || fail=1
done
row "server QP timeout (set 12)" "$(ep_get srv qp_attrs timeout)"
echo "  (QP timeout 4.096 us * 2^T: 17 = 0.54 s per retry, 14 = 67 ms; PLT = T - 1 on RoCE)"

step "5. ECE: the client offers vendor 0x1234 attr 0x5, a strict server answers 0x1234/0x7"
endpoint $NS_A ece role=server addr=$ADDR_A port=7180 ece_vendor_id=0x1234 ece_attr_mod=0x7 ece_policy=strict enable=1
endpoint $NS_B ece_ok role=client addr=$ADDR_A port=7180 ece_vendor_id=0x1234 ece_attr_mod=0x5 count=5 enable=1
endpoint $NS_B ece_bad role=client addr=$ADDR_A port=7180 ece_vendor_id=0x999 count=5 enable=1
wait_done ece_ok 60
wait_done ece_bad 60
printf '  %-10s %-10s %-8s %-28s %s\n' client offers state "remote_ece seen by client" "last_error"
for ep in ece_ok ece_bad; do
	printf '  %-10s %-10s %-8s %-28s %s\n' $ep "$(cat $CFS/$ep/ece_vendor_id)" "$(cat $CFS/$ep/state)" \
		"$(tr '\n' ' ' <$CFS/$ep/remote_ece)" "$(sed 's/.*rejected by the peer: //' $CFS/$ep/last_error)"
done
row "server saw (remote_ece)" "$(tr '\n' ' ' <$CFS/ece/remote_ece)"
row "server rejected" "$(ep_get ece stats rejected)"
[ "$(cat $CFS/ece_ok/state)" = done ] && [ "$(cat $CFS/ece_bad/state)" = error ] || fail=1

step "6. native echo mode: 2000 messages of 4 KiB, 16 in flight, each verified"
endpoint $NS_A esrv role=server mode=echo depth=16 size=4096 addr=$ADDR_A port=7181 enable=1
endpoint $NS_B ecli role=client mode=echo depth=16 size=4096 addr=$ADDR_A port=7181 count=2000 enable=1
wait_done ecli 120
printf '  %-8s %-8s %-14s %-10s %-10s %-10s %s\n' state pings verify_errors rtt_p50_us rtt_p99_us rtt_max_us throughput_mbit_s
printf '  %-8s %-8s %-14s %-10s %-10s %-10s %s\n' "$(cat $CFS/ecli/state)" "$(ep_get ecli stats pings)" \
	"$(ep_get ecli stats verify_errors)" "$(ep_get ecli stats rtt_p50_us)" "$(ep_get ecli stats rtt_p99_us)" \
	"$(ep_get ecli stats rtt_max_us)" "$(ep_get ecli stats throughput_mbit_s)"
[ "$(cat $CFS/ecli/state)" = done ] || fail=1

step "7. stock rping -c -V against the cmecho server: 100 pings of 64 bytes"
before=$(ep_get srv stats pings)
if ip netns exec $NS_B timeout 60 rping -c -a $ADDR_A -C 100 -S 64 -V >/dev/null 2>&1; then
	res=ok
else
	res=FAILED
	fail=1
fi
row "rping -c -V -C 100 -S 64" "$res; server counted $(($(ep_get srv stats pings) - before)) pings"

step "8. what the ack timeout is for: the path to the server cut (netem 100 % loss), retry_count 2"
tc -n $NS_B qdisc add dev vb root netem loss 0%
printf '  %-12s %-8s %-12s %-14s %-8s %s\n' ack_timeout QP-tmo "theory ms" "detected ms" state last_error
for t in unset 12; do
	ep=cut_$t
	endpoint $NS_B $ep role=client mode=echo depth=1 size=64 addr=$ADDR_A port=7181 duration_ms=600000 \
		ack_timeout=$t retry_count=2 enable=1 || exit 1
	wait_for 600 eval '[ "$(ep_get '$ep' stats pings)" -gt 20 ]'
	tc -n $NS_B qdisc change dev vb root netem loss 100%
	wait_done $ep 60
	tc -n $NS_B qdisc change dev vb root netem loss 0%
	qt=$(ep_get $ep qp_attrs timeout)
	us=$(ep_get $ep stats detect_us)
	printf '  %-12s %-8s %-12s %-14s %-8s %s\n' "$t" "$qt" "$((3 * 4096 * (1 << qt) / 1000000))" \
		"$([ "$us" != - ] && echo $((us / 1000)) || echo -)" "$(cat $CFS/$ep/state)" \
		"$(sed 's/^client 0: //' $CFS/$ep/last_error)"
	[ "$(cat $CFS/$ep/state)" = error ] || fail=1
done
tc -n $NS_B qdisc del dev vb root
echo "  (detected = what the module saw: oldest unacknowledged SEND to the failed completion;"
echo "   theory (retry_count + 1) x 4.096 us x 2^T; unset keeps the RoCE default 17; make bench sweeps T)"

step "9. tear down"
unload_cmecho && row "rmdir endpoints, rmmod" "ok"
row "cmecho CM ids left" "$(rdma res show cm_id | grep -c 'comm \[cmecho\]')"
net_cleanup
exit $fail
