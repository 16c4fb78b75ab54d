#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs every program in the Makefile's TEST_PROGS the way the kselftest runner
# does: one KTAP result per program, the program's own KTAP nested under it.
#   run_tests.sh [OUTPUT_FILE]     (the KTAP goes to stdout and, if given, the file)
cd "$(dirname "$0")" || exit 1
out=${1:-/dev/null}
# CMECHO_TESTS="a.sh b.sh" runs a subset.
read -r -a progs <<<"${CMECHO_TESTS:-$(sed -n 's/^TEST_PROGS *:= *//p' Makefile)}"
timeout_s=$(sed -n 's/^timeout=//p' settings)

# Stream the kernel log next to the results, so a crash leaves its trace.
if [ "$out" != /dev/null ] && [ -w "$(dirname "$out")" ]; then
	dmesg -w >"$(dirname "$out")/dmesg.log" 2>&1 </dev/null &
fi

{
	echo "TAP version 13"
	echo "1..${#progs[@]}"
	n=0
	rc_all=0
	for t in "${progs[@]}"; do
		n=$((n + 1))
		echo "# selftests: cmecho: $t"
		timeout "${timeout_s:-900}" ./"$t" 2>&1 | sed -u 's/^/    /'
		rc=${PIPESTATUS[0]}
		case $rc in
		0) echo "ok $n selftests: cmecho: $t" ;;
		4) echo "ok $n selftests: cmecho: $t # SKIP" ;;
		124) echo "not ok $n selftests: cmecho: $t # TIMEOUT ${timeout_s} seconds"; rc_all=1 ;;
		*) echo "not ok $n selftests: cmecho: $t # exit=$rc"; rc_all=1 ;;
		esac
	done
	exit $rc_all
} | tee "$out"
exit "${PIPESTATUS[0]}"
