#!/bin/bash
# The guest side of `make demo`: runs inside the VM as root.
set -u
cd "$(dirname "$0")/.." || exit 1
SELFTEST_DIR=$PWD/tools/testing/selftests/cmecho
# shellcheck source=../tools/testing/selftests/cmecho/lib.sh
. "$SELFTEST_DIR/lib.sh"

step() { printf '\n== %s\n' "$*"; }
row() { printf '  %-34s %s\n' "$1" "$2"; }

step "1. load cmecho.ko"
ensure_configfs
insmod "$CMECHO_KO" || exit 1
row "module" "$(lsmod | awk '$1=="cmecho"{print $1, $2 " bytes"}')"
row "kernel log" "$(dmesg | grep 'cmecho' | tail -1 | sed 's/^\[[^]]*\] //')"
row "/sys/kernel/config/cmecho" "$(ls $CFS | tr '\n' ' ')"
row "version" "$(cat $CFS/version)"

step "2. two hosts: netns $NS_A ($ADDR_A) and $NS_B ($ADDR_B) over veth, rxe on each end"
net_setup || { echo "network setup failed"; exit 1; }
rdma link show | sed 's/^/  /'

step "3. stock rping across them: 100 pings of 64 bytes, validated"
ip netns exec $NS_A timeout 60 rping -s -a $ADDR_A >/dev/null 2>&1 &
wait_for 100 cm_listening 7174
t0=$(date +%s%N)
if ip netns exec $NS_B timeout 60 rping -c -a $ADDR_A -C 100 -S 64 -V >/dev/null 2>&1; then
	res=ok
else
	res=FAILED
fi
t1=$(date +%s%N)
wait
row "rping -c -V -C 100 -S 64" "$res in $(((t1 - t0) / 1000000)) ms (TCG)"

step "4. unload"
net_cleanup
rmmod cmecho && row "rmmod cmecho" "ok"
row "/sys/kernel/config/cmecho" "$([ -e $CFS ] && echo present || echo gone)"
[ $res = ok ]
