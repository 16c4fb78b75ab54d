#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Every attribute rejects bad values with EINVAL, a readable last_error and no
# change; writes while enabled fail with EBUSY and change nothing either.
. "$(dirname "$0")/lib.sh"

HUGE=$(head -c 3000 /dev/zero | tr '\0' 7)
declare -A BAD=(
	[role]="|serverx|1|$HUGE"
	[addr]="|abc|1.2.3.4.5|999.1.1.1|::g|$HUGE"
	[port]="|abc|0|-1|65536|99999999999999999999|7174x|$HUGE"
	[ack_timeout]="|abc|32|-1|1.5|255|unsetx|$HUGE"
	[count]="|abc|0|-1|10000001|99999999999999999999|$HUGE"
	[size]="|abc|0|-1|65537|$HUGE"
	[clients]="|abc|0|-1|65|$HUGE"
	[enable]="abc|2|-1|$HUGE"
)
ATTRS="role addr port ack_timeout count size clients enable"

ktap_print_header
ktap_set_plan 14
dmesg_mark
load_cmecho
mkdir $CFS/ep

# write ATTR VALUE: the write's stderr on failure, nothing on success.
write() {
	(echo "$2" >"$CFS/ep/$1") 2>&1
}

for a in $ATTRS; do
	before=$(cat $CFS/ep/$a)
	ok=1
	IFS='|' read -r -a vals <<<"${BAD[$a]}"
	for v in "${vals[@]}"; do
		err=$(write $a "$v")
		after=$(cat $CFS/ep/$a)
		le=$(cat $CFS/ep/last_error)
		if ! echo "$err" | grep -q 'Invalid argument'; then
			ktap_print_msg "$a='${v:0:20}': expected EINVAL, got '${err:-success}'"
			ok=0
		elif [ "$after" != "$before" ]; then
			ktap_print_msg "$a='${v:0:20}': value changed from '$before' to '$after'"
			ok=0
		elif ! echo "$le" | grep -q "^$a: "; then
			ktap_print_msg "$a='${v:0:20}': last_error does not name the attribute: $le"
			ok=0
		fi
	done
	ktap_print_msg "$a: last_error after bad values: $(cat $CFS/ep/last_error)"
	ktap_test_result "$a: ${#vals[@]} bad values rejected with EINVAL, value unchanged" test $ok = 1
done

ktap_test_result "state unchanged (idle) after every bad write" test "$(cat $CFS/ep/state)" = idle

err=$(write enable 1)
ktap_test_result "enable with addr unset: EINVAL, last_error says so" \
	sh -c "echo '$err' | grep -q 'Invalid argument' && grep -q 'addr is not set' $CFS/ep/last_error"

net_setup || ktap_print_msg "network setup failed"
echo server >$CFS/ep/role
echo 10.77.0.99 >$CFS/ep/addr
err=$(write enable 1)
ktap_print_msg "enable on an address no device has: ${err:-success}; last_error: $(cat $CFS/ep/last_error)"
ktap_test_result "enable on an address no device has: fails with a reason, stays disabled" \
	test -n "$err" -a "$(cat $CFS/ep/enable)" = 0

rmdir $CFS/ep
in_ns $NS_A mkdir $CFS/ep
echo server >$CFS/ep/role
echo $ADDR_A >$CFS/ep/addr
echo 1 >$CFS/ep/enable
busy=1
for a in role addr port ack_timeout count size clients; do
	before=$(cat $CFS/ep/$a)
	case $a in
	role) v=client ;; addr) v=$ADDR_B ;; ack_timeout) v=14 ;; *) v=2 ;;
	esac
	err=$(write $a $v)
	if ! echo "$err" | grep -q 'busy' || [ "$(cat $CFS/ep/$a)" != "$before" ]; then
		ktap_print_msg "$a while enabled: '${err:-success}', value now $(cat $CFS/ep/$a)"
		busy=0
	fi
done
ktap_test_result "writes while enabled fail with EBUSY and change nothing" test $busy = 1
ktap_test_result "still listening after the refused writes" test "$(cat $CFS/ep/state)" = listening

unload_cmecho
net_cleanup
ktap_test_result "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
