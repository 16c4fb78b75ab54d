#!/bin/bash
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

step "2. two hosts: netns $NS_A ($ADDR_A) and $NS_B ($ADDR_B) over veth, rxe on each end"
net_setup || { echo "network setup failed"; exit 1; }
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

step "5. stock rping -c -V against the cmecho server: 100 pings of 64 bytes"
before=$(ep_get srv stats pings)
if ip netns exec $NS_B timeout 60 rping -c -a $ADDR_A -C 100 -S 64 -V >/dev/null 2>&1; then
	res=ok
else
	res=FAILED
	fail=1
fi
row "rping -c -V -C 100 -S 64" "$res; server counted $(($(ep_get srv stats pings) - before)) pings"

step "6. tear down"
unload_cmecho && row "rmdir endpoints, rmmod" "ok"
row "cmecho CM ids left" "$(rdma res show cm_id | grep -c 'comm \[cmecho\]')"
net_cleanup
exit $fail
