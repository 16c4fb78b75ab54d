#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Shared setup for cmecho's selftests: the module, two network namespaces joined by
# a veth pair with an rxe link on each end, and kernel-log checks. Source it.
#
# KTAP output comes from the kernel's own kselftest/ktap_helpers.sh, found as in
# the kernel tree: this directory sits beside kselftest/ (scripts/ksft-links makes
# that link to the cached kernel source when cmecho is built out of tree).

# Sourced from a test in this directory, or with SELFTEST_DIR set.
# Paths are cut with parameter expansion, not dirname: on the debug kernel under
# TCG every process costs about half a second.
case $0 in
*/*) SELFTEST_DIR=${SELFTEST_DIR:-$(cd "${0%/*}" && pwd)} ;;
*) SELFTEST_DIR=${SELFTEST_DIR:-$PWD} ;;
esac
. "$SELFTEST_DIR/../kselftest/ktap_helpers.sh"
CMECHO_KO=${CMECHO_KO:-$SELFTEST_DIR/../../../../cmecho.ko}
CMTIME_KO=${CMTIME_KO:-${CMECHO_KO%/*}/cmecho_cmtime.ko}
MISUSE_KO=${MISUSE_KO:-${CMECHO_KO%/*}/cmecho_misuse.ko}
SLOW_LOCK_KO=${SLOW_LOCK_KO:-${CMECHO_KO%/*}/cmecho_slow_lock.ko}
FAIL_CALL_KO=${FAIL_CALL_KO:-${CMECHO_KO%/*}/cmecho_fail_call.ko}
CFS=/sys/kernel/config/cmecho
# cmecho's debugfs directory (the whole connection listings); debugfs_on mounts
# debugfs first.
DFS=/sys/kernel/debug/cmecho

# Namespace and rxe link names carry this program's pid: both are global. With
# CMECHO_NET_KEEP=1 (run_tests.sh sets it) the programs of a run share one
# network, under fixed names (net_setup).
NS_A=
NS_B=
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2
if [ "${CMECHO_NET_KEEP:-}" = 1 ]; then
	KEPT_NS_A=cmecho-a
	KEPT_NS_B=cmecho-b
	RXE_A=rxe_a
	RXE_B=rxe_b
	# The kept network as net_setup made it (net_state).
	NET_STATE=/run/cmecho-net-state
else
	RXE_A=rxe_a$$
	RXE_B=rxe_b$$
fi

# ktap_check DESCRIPTION COMMAND [ARG...]: one KTAP result, ok when the command
# exits 0. Unlike ktap_test_result, the arguments keep their quoting.
ktap_check() {
	local desc=$1
	shift
	if "$@"; then
		ktap_test_pass "$desc"
	else
		ktap_test_fail "$desc"
	fi
}

# Kernel log reports that fail a test (and the whole run: scripts/verdict.py reads
# this line). The headers as the 7.3 source prints them: BUG:/WARNING:/Oops and
# the KASAN, KFENCE, UBSAN, lockdep and RCU reports; SLUB's "BUG <cache> (<taint>):
# <reason>" and "[<what> overwritten]" (no colon after BUG); lockdep switching
# itself off ("trying to register non-static key", "Disabling lock debugging");
# RCU CPU, expedited and tasks stalls; kmemleak's scans and its own warnings;
# spurious interrupts; duplicate sysfs names; Rust panics and overflows.
DMESG_REPORTS='BUG:|BUG [^ :]+ \((Not tainted|Tainted: [^)]*)\): |\[[A-Za-z ]+ overwritten\]|WARNING:|Oops|general protection|Kernel panic|kernel BUG at|UBSAN:|refcount_t:|INFO: task .* blocked for more than|detected (expedited )?stalls|self-detected stall|kmemleak: [0-9]+ new suspected|kmemleak: (Found object by alias|Cannot insert|Partially freeing unknown|Not resetting the checksum|Adding scan area|Scan area larger|Setting excess_ref|Not scanning unknown|Updating stack trace for unknown|Cannot allocate a|Memory pool empty|Kernel memory leak detector disabled|Kmemleak disabled)|ODEBUG:|list_(add|del) corruption|panicked at|attempt to [a-z ]+ with overflow|hard LOCKUP|soft lockup|INFO: trying to register non-static key|Disabling lock debugging due to kernel taint|irq [0-9]+: nobody cared|sysfs: cannot create duplicate filename'

# dmesg_mark [VAR]: where this test's part of the kernel log starts, in
# DMESG_START (or VAR, for a part of its own: klog_from $VAR reads it).
dmesg_mark() {
	printf -v "${1:-DMESG_START}" '%s' "$(dmesg | wc -l)"
}

# Kernel log lines since dmesg_mark.
dmesg_since() {
	dmesg | tail -n +"$((DMESG_START + 1))"
}

# klog_from START: the kernel log after its first START lines (a count taken
# as dmesg_mark takes DMESG_START), into the array KLOG, with one process.
klog_from() {
	mapfile -t -s "$1" KLOG < <(dmesg)
}

# Passes when the kernel log since dmesg_mark has no report ($DMESG_REPORTS).
check_dmesg_clean() {
	local _bad
	_bad=$(dmesg_since | grep -E "$DMESG_REPORTS" || true)
	if [ -n "$_bad" ]; then
		echo "$_bad" | sed 's/^/# dmesg: /'
		return 1
	fi
	return 0
}

ensure_configfs() {
	local dev mnt fs
	while read -r dev mnt fs _; do
		[ "$mnt $fs" = "/sys/kernel/config configfs" ] && return 0
	done </proc/mounts
	mount -t configfs none /sys/kernel/config
}

# module_loaded NAME: true when module NAME is loaded.
module_loaded() {
	local m
	while read -r m _; do
		[ "$m" = "$1" ] && return 0
	done </proc/modules
	return 1
}

# Polls that fork nothing: on the debug kernel under TCG a process creation
# costs about a second. nap SECONDS sleeps: a read that times out on a pipe
# nobody writes, opened on first use (in each subshell that naps).
nap() {
	[ -n "${NAP_FD:-}" ] || exec {NAP_FD}<> <(:)
	read -r -t "$1" -u "$NAP_FD" _
	return 0
}

# poll TENTHS CMD...: runs CMD every 0.1 s until it succeeds, for at most TENTHS
# tenths of a second. The wall clock (EPOCHREALTIME, in microseconds once its
# point is dropped) bounds the wait, not a count of tries: on a busy guest one
# read of an attribute can take longer than the nap. CMD should be a function
# or a builtin, so that nothing forks.
poll() {
	local end=$((${EPOCHREALTIME//[!0-9]/} + $1 * 100000))
	shift
	until "$@"; do
		((${EPOCHREALTIME//[!0-9]/} < end)) || return 1
		nap 0.1
	done
}

# wait_for TENTHS CMD...: runs CMD, its output discarded, until it succeeds, for
# at most TENTHS tenths of a second of wall-clock time (poll). CMD may start
# processes: each try then costs a second or more under TCG, and the bound is
# still the time, not a count of tries.
wait_for() {
	poll "$1" quietly "${@:2}"
}
# quietly CMD...: CMD with its output and errors discarded.
quietly() {
	"$@" >/dev/null 2>&1
}

# state_is EP STATE TENTHS: polls (as poll) until EP's state is STATE.
state_is() {
	poll "$3" state_now "$1" "$2"
}
state_now() {
	local s
	read -r s <"$CFS/$1/state" && [ "$s" = "$2" ]
}

# pings_over EP N: EP's stats count more than N pings.
pings_over() { [ "$(ep_get $1 stats pings)" -gt "$2" ] 2>/dev/null; }

# key_is EP ATTR KEY VALUE TENTHS: polls (as poll) until EP's ATTR has the
# line "KEY VALUE".
key_is() {
	poll "$5" key_now "$1" "$2" "$3" "$4"
}
key_now() {
	local line
	while read -r line; do
		[ "$line" = "$3 $4" ] && return 0
	done <"$CFS/$1/$2"
	return 1
}

# res_of KIND MODULE [-c]: the `rdma res show KIND` lines of a kernel module's
# RDMA resources, or with -c their count. The CM makes a kernel ULP's QPs and
# names them after itself (rdma_cm), so the QPs are those of every kernel ULP
# of the CM: in these tests, the module under test alone (user space's QPs
# carry their process names). One process (rdma): the lines are matched with
# builtins.
res_of() {
	local comm=$2 line n=0 lines=()
	[ "$1" = qp ] && comm=rdma_cm
	mapfile -t lines < <(rdma res show "$1" 2>/dev/null)
	for line in "${lines[@]}"; do
		[[ $line == *"comm [$comm]"* ]] || continue
		n=$((n + 1))
		[ "${3:-}" = -c ] || printf '%s\n' "$line"
	done
	[ "${3:-}" != -c ] || printf '%s\n' "$n"
}

# throttle_on / throttle_off: 250 ms of netem delay each way between the
# namespaces, while many connections come up. It keeps the early connections'
# echoes (two a second each at depth 1) from starving the later ones'
# connection setup: on the debug kernel under TCG, unthrottled, some connects
# ran past their 30 s timeout. Callers keep the ack timeout above the 500 ms
# round trip (T=20, 4.3 s), and let their clients' connects run until the
# CM's own retries of the request end (connect_timeout_ms=300000; the CM gives
# up after about 131 s at T=20): throttled, a loaded host still took longer
# than the default 30 s to set up the last of 64.
throttle_on() {
	tc -n $NS_A qdisc add dev va root netem delay 250ms
	tc -n $NS_B qdisc add dev vb root netem delay 250ms
}
throttle_off() {
	tc -n $NS_A qdisc del dev va root
	tc -n $NS_B qdisc del dev vb root
}

# silence_on / silence_off: everything namespace a sends is lost (netem), so a
# connect to a gets no answer; a permanent neighbour entry in b resolves
# $ADDR_A without an ARP answer. silence_off leaves the network as net_setup
# made it.
silence_on() {
	tc -n $NS_A qdisc add dev va root netem loss 100%
	ip -n $NS_B neigh replace $ADDR_A dev vb nud permanent \
		lladdr "$(ip netns exec $NS_A cat /sys/class/net/va/address)"
}
silence_off() {
	tc -n $NS_A qdisc del dev va root
	ip -n $NS_B neigh del $ADDR_A dev vb
}

# Two namespaces, a veth pair between them, an rxe link on each end. Under TCG
# on the debug kernel every process costs about a second and registering or
# unregistering an rxe device 12 to 15 s: the namespaces and the veth pair come
# from one ip, each end's addresses from one more, and the two rxe links are
# added at once (as net_teardown removes them). With CMECHO_NET_KEEP=1 a
# program takes over the network the one before it left, when that one left it
# as net_setup made it (net_kept), and net_cleanup keeps it for the next: making
# a network and removing it cost about 60 s a program.
net_setup() {
	local pa made=1
	if [ "${CMECHO_NET_KEEP:-}" = 1 ]; then
		net_names
		net_kept && made=0
	fi
	if [ $made = 1 ]; then
		net_teardown
		module_loaded rdma_rxe || modprobe rdma_rxe || return 1
		net_names
		printf '%s\n' "netns add $NS_A" "netns add $NS_B" \
			"link add va netns $NS_A type veth peer name vb netns $NS_B" | ip -batch - || return 1
		printf '%s\n' "addr add $ADDR_A/24 dev va" "link set va up" "link set lo up" |
			ip -n $NS_A -batch - &
		pa=$!
		printf '%s\n' "addr add $ADDR_B/24 dev vb" "link set vb up" "link set lo up" |
			ip -n $NS_B -batch - &
		wait_all $pa $! || return 1
	fi
	# A kept network's rxe links that a device removal took are added again.
	rxe_links_add || return 1
	# Both ends answer ping before RDMA traffic starts: up to 60 s (each try
	# starts two processes and may wait 1 s for its answer).
	wait_for 600 in_ns $NS_B ping -c 1 -W 1 $ADDR_A ||
		{ ktap_print_msg "net_setup: $ADDR_A not reachable from $NS_B"; return 1; }
	[ $made = 0 ] || [ "${CMECHO_NET_KEEP:-}" != 1 ] || net_state >"$NET_STATE"
}

# net_names: the namespaces' names: fixed when the programs of a run share the
# network (CMECHO_NET_KEEP=1), with this program's pid otherwise.
net_names() {
	if [ "${CMECHO_NET_KEEP:-}" = 1 ]; then
		NS_A=$KEPT_NS_A NS_B=$KEPT_NS_B
	else
		NS_A=cmecho-a-$$ NS_B=cmecho-b-$$
	fi
}

# net_state: what a program may change of the network, as text: each end's
# links and addresses (flags, MTU, root qdisc, addresses) and its permanent
# neighbour entries, without IPv6 DAD's passing "tentative".
net_state() {
	local ns out
	for ns in $NS_A $NS_B; do
		out=$(printf '%s\n' "addr show" "neigh show nud permanent" | ip -d -n $ns -batch - 2>&1) ||
			return 1
		printf '%s\n' "${out// tentative/}"
	done
}

# net_kept: the network the program before this one left is here and as
# net_setup made it (net_state). False otherwise, saying what changed.
net_kept() {
	local i now was
	[ -f "$NET_STATE" ] || return 1
	if [ ! -e /run/netns/$NS_A ] || [ ! -e /run/netns/$NS_B ]; then
		ktap_print_msg "net_setup: a namespace of the network is gone; a new one"
		return 1
	fi
	mapfile -t now < <(net_state)
	mapfile -t was <"$NET_STATE"
	for ((i = 0; i < ${#now[@]} || i < ${#was[@]}; i++)); do
		[ "${now[i]:-}" = "${was[i]:-}" ] && continue
		ktap_print_msg "net_setup: the network was changed (\"${was[i]:-}\" is now \"${now[i]:-}\"); a new one"
		return 1
	done
}

# wait_all PID...: waits for each of these background jobs; true when every
# one exited 0.
wait_all() {
	local pid rc=0
	for pid; do
		wait "$pid" || rc=1
	done
	return $rc
}

# rxe_links_add: adds this program's rxe links that are not registered, on
# the existing namespaces, both at once; true when every add succeeded.
rxe_links_add() {
	local pids=()
	if [ ! -e /sys/class/infiniband/$RXE_A ]; then
		in_ns $NS_A rdma link add $RXE_A type rxe netdev va &
		pids+=($!)
	fi
	if [ ! -e /sys/class/infiniband/$RXE_B ]; then
		in_ns $NS_B rdma link add $RXE_B type rxe netdev vb &
		pids+=($!)
	fi
	wait_all "${pids[@]}"
}

# links_up: re-adds this program's rxe links that are gone (after a device
# removal), on the existing namespaces; true once both are registered (up to
# 30 s: registering one takes 12 to 15 s under TCG).
links_up() {
	rxe_links_add 2>/dev/null
	wait_for 300 test -e /sys/class/infiniband/$RXE_A -a -e /sys/class/infiniband/$RXE_B
}

# rxe_gone: neither rxe link of this program is registered.
rxe_gone() {
	[ ! -e /sys/class/infiniband/$RXE_A ] && [ ! -e /sys/class/infiniband/$RXE_B ]
}

# Ends what still runs in this program's namespaces and, unless they are kept
# for the next program (CMECHO_NET_KEEP=1), removes them and their rxe links
# (the exit trap runs it again after a test's own call).
net_cleanup() {
	if [ "${CMECHO_NET_KEEP:-}" = 1 ]; then
		net_kill
	else
		net_teardown
	fi
	return 0
}

# net_kill: ends what runs in the namespaces (SIGTERM, then SIGKILL to what is
# left after 10 s) and waits until it has exited.
net_kill() {
	local pids
	[ -n "$NS_A$NS_B" ] || return 0
	pids=$(printf 'netns pids %s\n' $NS_A $NS_B | ip -force -batch - 2>/dev/null)
	[ -n "$pids" ] || return 0
	# shellcheck disable=SC2086
	kill $pids 2>/dev/null
	# shellcheck disable=SC2086
	wait_for 100 pids_gone $pids && return 0
	pids=$(printf 'netns pids %s\n' $NS_A $NS_B | ip -force -batch - 2>/dev/null)
	# shellcheck disable=SC2086
	[ -z "$pids" ] || kill -KILL $pids 2>/dev/null
	# shellcheck disable=SC2086
	wait_for 100 pids_gone $pids
}

# pids_gone PID...: each of these processes has exited: it is gone, or a zombie
# (an exited child of this shell, until it is waited for). A zombie has closed
# its files, and with them its RDMA resources; a task that has only left its
# namespace may not have yet.
pids_gone() {
	local pid st
	for pid; do
		[ -e /proc/$pid ] || continue
		st=
		read -r st 2>/dev/null </proc/$pid/stat || continue
		st=${st##*) }
		[ "${st%% *}" = Z ] || return 1
	done
}

# Removes the rxe links (both at once), then ends what still runs in the
# namespaces and removes them, if there are any.
net_teardown() {
	local dev dels=()
	for dev in $RXE_A $RXE_B; do
		[ -e /sys/class/infiniband/$dev ] || continue
		rdma link del $dev 2>/dev/null &
		dels+=($!)
	done
	wait_all "${dels[@]}"
	if [ -n "$NS_A$NS_B" ]; then
		net_kill
		printf 'netns del %s\n' $NS_A $NS_B | ip -force -batch - 2>/dev/null
		NS_A= NS_B=
	fi
	[ "${CMECHO_NET_KEEP:-}" != 1 ] || rm -f "$NET_STATE"
	# Device unregistration finishes asynchronously: let it (up to 120 s; one
	# takes 12 to 15 s under TCG), so that the next setup does not race with it.
	wait_for 1200 rxe_gone ||
		ktap_print_msg "net_teardown: rxe links still present: $(rdma link show | tr '\n' ' ')"
	return 0
}

# net_drop_kept: removes the network the programs of a run shared
# (CMECHO_NET_KEEP=1; run_tests.sh, after the last program).
net_drop_kept() {
	net_names
	net_teardown
}

# True when an RDMA CM id listens on port $1 (any namespace).
cm_listening() {
	rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*src-addr [^ ]*:$1 "
}

# Runs a command inside namespace $1: only the network namespace changes (not
# /sys, as with `ip netns exec`), so configfs stays mounted where it is. An
# empty $1 runs it where it is (scripts/two-hosts-guest.sh: one host each).
in_ns() {
	if [ -n "$1" ]; then
		nsenter --net="/run/netns/$1" "${@:2}"
	else
		"${@:2}"
	fi
}

# Loads cmecho.ko if it is not loaded.
load_cmecho() {
	ensure_configfs
	module_loaded cmecho || insmod "$CMECHO_KO"
}

# Removes every endpoint.
rmdir_endpoints() {
	local d
	for d in "$CFS"/*/; do
		[ -d "$d" ] && rmdir "$d"
	done
}

# Removes every endpoint, then the module.
unload_cmecho() {
	rmdir_endpoints
	rmmod cmecho
}

# Mounts debugfs where it is not mounted yet (KUnit results, $DFS).
debugfs_on() {
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
}

# tracefs_on: mounts tracefs at $TR where it is not mounted yet, and turns comm
# recording off. With it, enabling the first event and disabling the last
# (un)register probes on sched_switch and sched_wakeup, and the kernel patches
# those hot call sites live (text_poke). On this debug kernel under TCG one
# such patch ended in "Oops: int3" in ttwu_do_wakeup, a panic: another vCPU ran
# the breakpoint after the patch was done. The events' fields do not need it.
TR=/sys/kernel/tracing
tracefs_on() {
	{ [ -e $TR/trace ] || mount -t tracefs nodev $TR; } && echo 0 >$TR/options/record-cmd
}

# Leaves nothing behind for the next program, however this one ended: every
# endpoint, the modules, and what runs in the namespaces (net_cleanup: the
# namespaces and rxe links too, unless the next program takes them over). A
# teardown that blocks in the kernel is ended by the hung-task detector (it
# panics the guest). A program past its timeout gets SIGTERM twice (the
# runner's two nested timeout commands), the second while this runs: it is
# ignored here, or the cleanup would die halfway and the next program would
# find this one's endpoints.
cmecho_cleanup() {
	trap '' TERM
	! module_loaded cmecho_slow_lock || rmmod cmecho_slow_lock
	fail_call_off
	failslab_off
	rmdir_endpoints 2>/dev/null
	module_loaded cmecho_cmtime && rmmod cmecho_cmtime
	module_loaded cmecho_misuse && rmmod cmecho_misuse
	module_loaded cmecho && rmmod cmecho
	net_cleanup
}
trap cmecho_cleanup EXIT

# slow_lock_on COMM MS: from now on, every mutex that cmecho's code takes in a
# task whose name starts with COMM waits MS milliseconds first
# (slow_lock/slow_lock.c): the windows between cmecho's critical sections in
# that task grow from nanoseconds to MS, so a race in them happens on every
# try. slow_lock_off ends it, and the waits under way; slow_lock_hits prints
# how many locks waited since slow_lock_on. The module is loaded once per
# program (its probe sits on a hot function) and unloaded by cmecho_cleanup.
SLOW_LOCK_PARAMS=/sys/module/cmecho_slow_lock/parameters
slow_lock_on() {
	if module_loaded cmecho_slow_lock; then
		# A string parameter keeps a newline written with it: printf.
		echo 0 >$SLOW_LOCK_PARAMS/delay_ms &&
			printf '%s' "$1" >$SLOW_LOCK_PARAMS/comm &&
			echo 0 >$SLOW_LOCK_PARAMS/hits &&
			echo "$2" >$SLOW_LOCK_PARAMS/delay_ms
	else
		insmod "$SLOW_LOCK_KO" comm="$1" delay_ms="$2"
	fi
}
slow_lock_off() {
	! module_loaded cmecho_slow_lock || echo 0 >$SLOW_LOCK_PARAMS/delay_ms
}
slow_lock_hits() {
	local h
	read -r h <$SLOW_LOCK_PARAMS/hits
	printf '%s\n' "$h"
}
# slow_lock_hits_ge N: at least N locks have waited (or are waiting).
slow_lock_hits_ge() {
	local h
	read -r h <$SLOW_LOCK_PARAMS/hits
	[ "$h" -ge "$1" ]
}

# fail_call_on FUNC ERRNO N: the next N calls of kernel function FUNC return
# ERRNO (negative) without running (fail_call/fail_call.c), for error paths a
# device never takes on its own. fail_call_off ends it; fail_call_hits prints
# how many calls failed.
fail_call_on() {
	insmod "$FAIL_CALL_KO" func="$1" err="$2" times="$3"
}
fail_call_off() {
	! module_loaded cmecho_fail_call || rmmod cmecho_fail_call
}
fail_call_hits() {
	local h
	read -r h </sys/module/cmecho_fail_call/parameters/hits
	printf '%s\n' "$h"
}

# failslab_on: from now on every slab allocation whose call stack runs through
# cmecho.ko's code fails, in whichever task it runs (a CM handler's worker, a
# completion's, the writer of a configfs file): failslab with its stack filter
# on the module's text, from its first text symbol to the next symbol of the
# kernel after its last one. failslab_off ends it (and does nothing where it
# is not on); failslab_hits prints how many allocations failed. Needs
# CONFIG_FAILSLAB, CONFIG_FAULT_INJECTION_DEBUG_FS and
# CONFIG_FAULT_INJECTION_STACKTRACE_FILTER (scripts/kernel-debug.config).
FAILSLAB=/sys/kernel/debug/failslab
FAILSLAB_TIMES=1000000
failslab_on() {
	local lo hi end
	debugfs_on
	[ -e $FAILSLAB/require-start ] || {
		ktap_print_msg "no $FAILSLAB/require-start: this kernel lacks failslab or its stack filter"
		return 1
	}
	# Addresses are 16 hex digits: compared as strings, they sort as numbers.
	read -r lo hi < <(awk '$4 == "[cmecho]" && ($2 == "t" || $2 == "T") {
		if (lo == "" || $1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { print lo, hi }' /proc/kallsyms)
	[ -n "$hi" ] || { ktap_print_msg "failslab_on: no text symbol of cmecho in /proc/kallsyms"; return 1; }
	# Hidden addresses (kptr_restrict) read as zeros: the range would be
	# 0..~0, which failslab takes for no filter at all, failing every
	# allocation of the kernel.
	[ "$lo" != 0000000000000000 ] || { ktap_print_msg "failslab_on: /proc/kallsyms hides addresses"; return 1; }
	end=$(awk -v hi="$hi" '$1 > hi && (e == "" || $1 < e) { e = $1 } END { print e }' /proc/kallsyms)
	[ -n "$end" ] || end=ffffffffffffffff
	echo 0 >$FAILSLAB/probability &&
		echo N >$FAILSLAB/ignore-gfp-wait &&
		echo 0 >$FAILSLAB/verbose &&
		echo 32 >$FAILSLAB/stacktrace-depth &&
		echo "0x$lo" >$FAILSLAB/require-start &&
		echo "0x$end" >$FAILSLAB/require-end &&
		echo 1 >$FAILSLAB/interval &&
		echo $FAILSLAB_TIMES >$FAILSLAB/times &&
		echo 100 >$FAILSLAB/probability
}
failslab_off() {
	[ ! -e $FAILSLAB/probability ] || echo 0 >$FAILSLAB/probability
}
failslab_hits() {
	local t
	read -r t <$FAILSLAB/times
	printf '%s\n' $((FAILSLAB_TIMES - t))
}

# Creates endpoint $2 in namespace $1 and writes attribute=value pairs ($3...).
endpoint() {
	_ns=$1
	_ep=$2
	shift 2
	in_ns "$_ns" mkdir "$CFS/$_ep" || return 1
	for _kv in "$@"; do
		echo "${_kv#*=}" >"$CFS/$_ep/${_kv%%=*}" || {
			ktap_print_msg "$_ep: writing ${_kv%%=*} failed: $(<"$CFS/$_ep/last_error")"
			return 1
		}
	done
}

# Value of key $3 in attribute file $2 of endpoint $1 (`key value` lines).
# The polls and reads below fork nothing: on the debug kernel under TCG a
# process costs about half a second.
ep_get() {
	local k v
	while read -r k v; do
		[ "$k" = "$3" ] && { printf '%s\n' "$v"; return 0; }
	done <"$CFS/$1/$2"
	return 0
}

# Waits up to $2 seconds for endpoint $1 to reach state done or error.
wait_done() {
	local s end=$((SECONDS + $2))
	while :; do
		read -r s <"$CFS/$1/state"
		case $s in
		done | error) return 0 ;;
		esac
		[ $SECONDS -lt $end ] || return 1
		nap 0.1
	done
}

# all_closed EP: every connection endpoint EP lists is closed.
all_closed() {
	local line
	while IFS= read -r line; do
		[ -z "$line" ] || [[ $line == *"state closed"* ]] || return 1
	done <"$CFS/$1/connections"
}

# refused EP ADDR PORT SIZE DEPTH WHY: an echo client EP in $NS_B of SIZE
# bytes and depth DEPTH, to ADDR:PORT, ends in error without a connection or a
# message, and its last_error ends with the server's reject, explained: WHY
# (e.g. "size 256 above the server's 64"). Removes EP.
refused() {
	local ep=$1 le ok=1
	endpoint $NS_B $ep role=client mode=echo addr="$2" port=$3 size=$4 depth=$5 count=5 enable=1
	wait_done $ep 180
	le=$(<"$CFS/$ep/last_error")
	ktap_print_msg "$ep: $(<"$CFS/$ep/state"), connections $(ep_get $ep stats connections), pings $(ep_get $ep stats pings), rejected $(ep_get $ep stats rejected); last_error: $le"
	[ "$(<"$CFS/$ep/state")" = error ] && [ "$(ep_get $ep stats connections)" = 0 ] &&
		[ "$(ep_get $ep stats pings)" = 0 ] && [ "$(ep_get $ep stats rejected)" = 1 ] &&
		[[ $le == "client 0: "*"rejected by the peer: "*" (reason 28): $6" ]] && ok=0
	rmdir "$CFS/$ep"
	return $ok
}

# Prints an endpoint's state, stats and last error as KTAP diagnostics.
ep_diag() {
	local line
	ktap_print_msg "$1: state $(<"$CFS/$1/state"); last_error: $(<"$CFS/$1/last_error")"
	while IFS= read -r line; do
		printf '# %s stats: %s\n' "$1" "$line"
	done <"$CFS/$1/stats"
}

# True when `rdma res show cm_id` works and lists no id owned by cmecho (kernel
# ids show their module as "comm [cmecho]"); a failing rdma fails the check, and
# cmecho_cm_ids_seen is its positive control.
no_cmecho_cm_ids() {
	local out left
	out=$(rdma res show cm_id 2>&1) ||
		{ ktap_print_msg "rdma res show cm_id failed: $out"; return 1; }
	left=$(printf '%s\n' "$out" | grep 'comm \[cmecho\]')
	[ -z "$left" ] && return 0
	printf '%s\n' "$left" | sed 's/^/# cm_id left: /'
	return 1
}

# cmecho_cm_ids_seen [N]: true when `rdma res show cm_id` works and lists at least
# N (default 1) ids owned by cmecho: the same match as no_cmecho_cm_ids, seen
# matching while endpoints are live.
cmecho_cm_ids_seen() {
	local out n
	out=$(rdma res show cm_id 2>&1) ||
		{ ktap_print_msg "rdma res show cm_id failed: $out"; return 1; }
	n=$(printf '%s\n' "$out" | grep -c 'comm \[cmecho\]')
	ktap_print_msg "rdma res show cm_id: $n ids of cmecho, ${1:-1} or more expected"
	[ "$n" -ge "${1:-1}" ]
}

# True when the kernel log since dmesg_mark has a line containing the fixed
# string $1.
dmesg_since_has() {
	dmesg_since | grep -qF -- "$1"
}
