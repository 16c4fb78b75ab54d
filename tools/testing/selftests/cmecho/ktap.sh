#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# KTAP output for cmecho's selftests, with the vocabulary of the kernel's
# kselftest/ktap_helpers.sh. Source it; call ktap_print_header and ktap_set_plan
# first, ktap_finished last (it exits: 0 all passed, 1 any failed, 4 only skips).

KTAP_N=0
KTAP_PASS=0
KTAP_FAIL=0
KTAP_SKIP=0

ktap_print_header() {
	echo "TAP version 13"
}

ktap_set_plan() {
	KTAP_PLAN=$1
	echo "1..$1"
}

ktap_print_msg() {
	echo "# $*"
}

ktap_test_pass() {
	KTAP_N=$((KTAP_N + 1))
	KTAP_PASS=$((KTAP_PASS + 1))
	echo "ok $KTAP_N $*"
}

ktap_test_fail() {
	KTAP_N=$((KTAP_N + 1))
	KTAP_FAIL=$((KTAP_FAIL + 1))
	echo "not ok $KTAP_N $*"
}

# ktap_test_skip NAME REASON
ktap_test_skip() {
	KTAP_N=$((KTAP_N + 1))
	KTAP_SKIP=$((KTAP_SKIP + 1))
	echo "ok $KTAP_N $1 # SKIP $2"
}

# ktap_test_result NAME COMMAND...: runs the command, passes when it exits 0.
ktap_test_result() {
	_name=$1
	shift
	if "$@"; then
		ktap_test_pass "$_name"
	else
		ktap_test_fail "$_name"
	fi
}

ktap_finished() {
	echo "# Totals: pass:$KTAP_PASS fail:$KTAP_FAIL xfail:0 xpass:0 skip:$KTAP_SKIP error:0"
	if [ -n "${KTAP_PLAN:-}" ] && [ "$KTAP_N" -ne "$KTAP_PLAN" ]; then
		echo "# plan was $KTAP_PLAN tests, ran $KTAP_N"
		exit 1
	fi
	if [ "$KTAP_FAIL" -gt 0 ]; then
		exit 1
	elif [ "$KTAP_SKIP" -gt 0 ] && [ "$KTAP_PASS" -eq 0 ]; then
		exit 4
	fi
	exit 0
}
