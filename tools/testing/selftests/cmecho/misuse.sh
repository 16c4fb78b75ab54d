#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The misuse fixture (misuse/misuse.rs) commits, one load per case, a call that cmecho's rdma layer
# lets a ULP write but must refuse: close_and_wait from a connection's own CM
# handler (the passive side's setup and accepted), its own completion or its
# own with_res closure; two connections' completions each close_and_wait-ing
# the other at once; connect of a new connection from a CM handler; with_res of one connection nested in another's;
# disconnect_and_wait from a CM handler (it would wait for the DISCONNECTED
# that handler holds up). Each
# must come back with its errno, not hang (the hung-task detector would panic
# the guest), and leave no RDMA resource of the fixture behind.
. "$(dirname "$0")/lib.sh"

# Case number:name. Case 2 (connect on an accepted connection) is gone: it does
# not compile any more, which scripts/check's build_fail step shows.
CASES="0:setup 1:accepted 3:completion 4:with_res 5:cycle 6:connect_in_handler
7:nested_with_res 8:disconnect_and_wait_in_handler"
ktap_print_header
ktap_set_plan 18
dmesg_mark
net_setup || ktap_print_msg "network setup failed"

# The fixture's RDMA resources still listed by `rdma res show` (lib.sh's
# res_of: cmecho is not loaded here, so the CM's QPs are the fixture's).
misuse_left() {
	local kind line
	for kind in cm_id qp cq pd mr; do
		while IFS= read -r line; do
			printf '# %s left: %s\n' $kind "$line"
		done < <(res_of $kind cmecho_misuse)
	done
}

for c in $CASES; do
	i=${c%%:*} c=${c#*:}
	ip netns exec $NS_A timeout 120 insmod "$MISUSE_KO" addr=$ADDR_A port=$((7190 + i)) case=$i
	rc=$?
	dmesg_since | grep "cmecho_misuse: case $i " | sed 's/^\[[^]]*\] /# /'
	ktap_check "case $i ($c): the misuse is refused with its errno" test $rc -eq 0
	grep -q '^cmecho_misuse ' /proc/modules && rmmod cmecho_misuse
	left=$(misuse_left)
	[ -n "$left" ] && printf '%s\n' "$left"
	ktap_check "case $i ($c): no cm_id, qp, cq, pd or mr of the sample left" test -z "$left"
done
# The fixture logs the errno it got; the refusals name the right ones.
ktap_check "the cases that would wait for themselves answered EDEADLK" \
	test "$(dmesg_since | grep -c 'cmecho_misuse: case [0-8] .*refused with EDEADLK')" = 8
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
