#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The harness's negative control (scripts/check --canary), not one of TEST_PROGS:
# CMECHO_CANARY=<case> loads cmecho_canary.ko with fault=<case> (warn, leak,
# lockdep, hang, panic), or, for "unfinished", ends this program before its plan
# as a crashed test would. Every case must make the count fail and be named.
. "$(dirname "$0")/lib.sh"

CANARY_KO=$(dirname "$CMECHO_KO")/cmecho_canary.ko
ktap_print_header
ktap_set_plan 2
ktap_check "cmecho_canary.ko exists" test -f "$CANARY_KO"
case ${CMECHO_CANARY:-} in
unfinished)
	ktap_print_msg "canary: ending before the plan, with exit status 0"
	exit 0
	;;
warn | leak | lockdep | hang | panic)
	ktap_check "insmod cmecho_canary.ko fault=$CMECHO_CANARY" insmod "$CANARY_KO" fault="$CMECHO_CANARY"
	rmmod cmecho_canary 2>/dev/null
	;;
*)
	ktap_test_fail "CMECHO_CANARY names a case (got '${CMECHO_CANARY:-}')"
	;;
esac
ktap_finished
