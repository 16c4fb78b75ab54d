#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The guest side of `make bench`: runs inside the VM (the bench kernel) as root.
#
#   scripts/bench-guest.sh OUTDIR ROUNDS
#
# Each pair (cmecho, then its anchor) runs back to back on the same two namespaces,
# ROUNDS times. Every measurement is one line of OUTDIR/raw.tsv:
#   round <TAB> case <TAB> tool <TAB> key=value ...
# scripts/bench-report turns them into medians, spreads, ratios and plots. A
# progress line per case goes to stdout. Times are taken with bash's
# $EPOCHREALTIME (no process is forked for a clock read). The depth-1,
# pipelined and many-connection runs also carry cpu_busy_us: the whole guest's
# CPU time that was not idle during the run (/proc/stat); the guest runs
# nothing else meanwhile, so it is both sides' work.
set -u
cd "$(dirname "$0")/.." || exit 1
SELFTEST_DIR=$PWD/tools/testing/selftests/cmecho
# shellcheck source=../tools/testing/selftests/cmecho/lib.sh
. "$SELFTEST_DIR/lib.sh"

OUT=$1
ROUNDS=$2
RAW=$OUT/raw.tsv
: >"$RAW"
SIZES=(64 4096 65536)
# Depth-1 RTT iterations per size, and the pipelined runs' depth and length.
declare -A LAT_ITERS=([64]=2000 [4096]=1000 [65536]=300)
# The traced pipelined runs' echoes (1b): short, so that the trace holds them.
declare -A PROF_BW_N=([64]=4000 [4096]=2000 [65536]=200)
BW_DEPTH=64
BW_MS=3000
# Many connections: one client endpoint's connections ("clients", at most 64)
# and each one's depth, against the pipelined runs' servers, vs ib_send_bw -q
# with as many QPs of that tx depth; the sizes (each one of SIZES) and length.
AGG_CONNS=64
AGG_DEPTH=16
AGG_MS=3000
AGG_SIZES=(64 4096)
# Busy polling (busy_poll_us) of both sides' CQs in a second depth-1 run: longer
# than a round trip here, so that each side is still polling when the next
# completion comes.
BUSY_POLL_US=1000
# Dead-peer detection: the ack timeouts and retry counts swept, and the loss cases.
DETECT_T=(8 10 12 14 16 18 20)
DETECT_RETRY=(0 1 2 3)
LOSS_T=(10 14 18)
LOSS_PCT=(1 10 30)
LOSS_MS=4000
# The ack-timeout advisor: one-way delays added on the client's egress (ms), and
# how long each run (to measure, then at the suggested T) lasts.
ADVISE_DELAY_MS=(0 5 50)
ADVISE_MS=3000
# CM setup: connections per run, cmecho's cmtime sample vs rdma-core's cmtime.
CM_CONNS=(50 500)
# BENCH_QUICK=1: one point of each, to try the script itself.
if [ "${BENCH_QUICK:-0}" = 1 ]; then
	SIZES=(64)
	AGG_SIZES=(64)
	DETECT_T=(14)
	DETECT_RETRY=(1)
	LOSS_T=(14)
	LOSS_PCT=(10)
	CM_CONNS=(50)
	ADVISE_DELAY_MS=(5)
fi

total=$((ROUNDS * (7 * ${#SIZES[@]} + 2 * ${#AGG_SIZES[@]} + 4 * ${#SIZES[@]} + 2 + 3 + 3 * ${#CM_CONNS[@]} + ${#DETECT_T[@]} * ${#DETECT_RETRY[@]} + ${#LOSS_T[@]} * ${#LOSS_PCT[@]} + 2 * ${#ADVISE_DELAY_MS[@]} + 2)))
step=0
t_start=$EPOCHREALTIME
progress() {
	step=$((step + 1))
	printf 'bench: [%d/%d] %4ss round %d: %s\n' $step $total \
		$(((${EPOCHREALTIME/./} - ${t_start/./}) / 1000000)) "$round" "$*"
}
record() { # case tool key=value...
	local IFS=$'\t'
	printf '%s\t%s\n' "$round" "$*" >>"$RAW"
}
now_us() { echo "${EPOCHREALTIME/./}"; }
# cpu_busy_us VAR: sets VAR to the guest's CPU time so far, in µs, that was
# neither idle nor iowait: user + nice + system + irq + softirq + steal of
# /proc/stat's cpu line (guest time is within user), in USER_HZ ticks. Read
# with bash's read, so that nothing forks inside a measured run.
CLK_TCK=$(getconf CLK_TCK)
[[ $CLK_TCK =~ ^[1-9][0-9]*$ ]] || { echo "bench: getconf CLK_TCK gave '$CLK_TCK'"; exit 1; }
cpu_busy_us() {
	local _c u n s i w q sq st
	read -r _c u n s i w q sq st _ </proc/stat
	printf -v "$1" '%s' $(((u + n + s + q + sq + st) * 1000000 / CLK_TCK))
}
# The stats keys of endpoint $1 as key=value words.
stats_kv() {
	local k v out=
	while read -r k v; do out+="$k=$v "; done <"$CFS/$1/stats"
	printf '%s' "$out"
}
rm_ep() { [ -d "$CFS/$1" ] && rmdir "$CFS/$1"; }
# The steps of a cmtime client's report as key=value words: each step's µs per
# connection, the connect step's wall time as connect_total_ms, and as failed
# the lines it prints for a connection that failed ("event: ..., error: N",
# "RDMA_CM_EVENT_ADDR_ERROR, ...", "failure creating qp: ...").
# Its step lines read "create id    :  total ms  max ms  min us  us / conn".
cmtime_kv() {
	echo "$1" | awk -F: '
		/^[a-z ]+ *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$/ { n = $1; sub(/ +$/, "", n); gsub(/ /, "_", n);
			split($2, f, " "); printf "%s=%s ", n, f[4]; if (n == "connect") printf "connect_total_ms=%s ", f[1] }
		/^(event: |RDMA_CM_EVENT_|failure )/ { failed++ }
		END { printf "failed=%d ", failed }'
}
# The data line of a perftest report: the first line whose first field is the size.
perftest_line() { awk -v s="$1" '$1 == s && NF >= 5 { print; exit }'; }
# Runs the perftest server in A and the client in B; prints the client's report,
# then a line cpu_busy_us=N: the guest's busy CPU time (cpu_busy_us) from the
# server listening until both have exited (its last line: ${out##*cpu_busy_us=}).
perftest() { # tool args...
	local tool=$1 out c0 c1
	shift
	in_ns $NS_A timeout 120 "$tool" -R -F "$@" >/dev/null 2>&1 &
	local srv=$!
	wait_for 600 cm_listening 18515
	cpu_busy_us c0
	# Its connection is now and then rejected as if nobody listened yet
	# (RDMA_CM_EVENT_REJECTED, status 8) while the server waits on: once more,
	# and the CPU time counted from then.
	if ! out=$(in_ns $NS_B timeout 120 "$tool" -R -F "$@" $ADDR_A 2>&1); then
		printf '# round %s: %s -R -F %s failed, tried again\n%s\n' "$round" "$tool" "$*" "$out" >>"$OUT/perftest.log"
		nap 1
		cpu_busy_us c0
		out=$(in_ns $NS_B timeout 120 "$tool" -R -F "$@" $ADDR_A 2>&1)
	fi
	wait $srv
	cpu_busy_us c1
	printf '# round %s: %s -R -F %s\n%s\n' "$round" "$tool" "$*" "$out" >>"$OUT/perftest.log"
	printf '%s\ncpu_busy_us=%s\n' "$out" $((c1 - c0))
}

# The netem qdisc on the client's egress (added once, losing nothing, before
# the clients that need it start): loss_set PERCENT.
loss_set() { tc -n $NS_B qdisc change dev vb root netem loss "$1%"; }
# rxe_retries PREFIX: the client's rxe retries so far, as PREFIXkey=value words:
# retransmissions its retry timer started (completer_retry_err), and those its
# peer asked for with a sequence NAK (rcvd_seq_err).
rxe_retries() {
	local w k= out=
	for w in $(rdma statistic show link "$RXE_B/1"); do
		case $k in completer_retry_err | rcvd_seq_err) out+="$1$k=$w " ;; esac
		k=$w
	done
	printf '%s' "$out"
}
# A client that has done more than 20 echoes; waits up to 60 s.
running_with_echoes() { wait_for 600 eval '[ "$(ep_get '"$1"' stats pings)" -gt 20 ]'; }
# A stock rping client against PORT for COUNT pings; prints how long it took, in µs.
stock_client() { # port count
	local t0 t1
	t0=$(now_us)
	in_ns $NS_B timeout 300 rping -c -a $ADDR_A -p $1 -C $2 -S 64 >/dev/null 2>&1 || return 1
	t1=$(now_us)
	echo $((t1 - t0))
}
# A stock rping server and client, COUNT pings; prints the client's time, in µs.
stock_pair() { # count
	in_ns $NS_A timeout 300 rping -s -a $ADDR_A -p 7311 -C $1 -S 64 >/dev/null 2>&1 &
	local srv=$! r
	wait_for 600 cm_listening 7311
	r=$(stock_client 7311 $1)
	wait $srv
	echo "$r"
}

TRACEFS=/sys/kernel/tracing
[ -e $TRACEFS/tracing_on ] || mount -t tracefs nodev $TRACEFS 2>/dev/null
# No comm recording: with it, the first event enabled and the last disabled
# (un)register probes on sched_switch and sched_wakeup, which patches those hot
# call sites live; under TCG such a patch has ended in a panic (see the
# selftests' tracing.sh). The events read here do not need it.
echo 0 >$TRACEFS/options/record-cmd
load_cmecho || exit 1
net_setup || { echo "bench: network setup failed"; exit 1; }
echo "bench: kernel $(uname -r), $(nproc) CPUs, rxe between two namespaces over veth"
uname -r >"$OUT/kernel"

# echo_servers NAME BASE_PORT KNOB...: one native echo server per size,
# NAME<size> on BASE_PORT + the size's index, with KNOB...
echo_servers() {
	local name=$1 base=$2 i=0 s
	shift 2
	for s in "${SIZES[@]}"; do
		endpoint $NS_A $name$s role=server mode=echo addr=$ADDR_A port=$((base + i)) \
			size=$s "$@" enable=1 || return 1
		i=$((i + 1))
	done
}
# One per size deep enough for the pipelined runs (on the default poll
# context, softirq); for the depth-1 runs, one whose connections' CQs are
# busy-polled, one on the core's per-CPU workqueue and one on its unbound one
# (poll_context=workqueue, unbound_workqueue): each poll context side by side.
echo_servers esrv 7300 depth=$BW_DEPTH mem_budget_kib=65536 || exit 1
echo_servers bsrv 7320 depth=1 busy_poll_us=$BUSY_POLL_US || exit 1
echo_servers wsrv 7340 depth=1 poll_context=workqueue || exit 1
echo_servers usrv 7360 depth=1 poll_context=unbound_workqueue || exit 1
port_of() { local i=0 s; for s in "${SIZES[@]}"; do [ "$s" = "$1" ] && echo $((7300 + i)); i=$((i + 1)); done; }
bport_of() { echo $(($(port_of $1) + 20)); }
wport_of() { echo $(($(port_of $1) + 40)); }
uport_of() { echo $(($(port_of $1) + 60)); }
# The CM setup's 500 connections at once: above max_conns' default of 256.
endpoint $NS_A rsrv role=server mode=rping addr=$ADDR_A port=7310 max_conns=1024 enable=1 || exit 1

echo_client() { # name size depth count|- duration_ms|- [knob=value...]
	local n=$1 s=$2 d=$3 c=$4 ms=$5
	shift 5
	local run=(role=client mode=echo addr=$ADDR_A port=$(port_of $s) depth=$d size=$s)
	[ "$c" != - ] && run+=(count=$c)
	[ "$ms" != - ] && run+=(duration_ms=$ms)
	endpoint $NS_B $n "${run[@]}" "$@" enable=1
}

# cmecho_run EP WAIT_S ARGS...: runs echo_client EP ARGS... until it is done (at
# most WAIT_S) and removes it. Leaves its state and stats as key=value words in
# KV, its last_error (spaces as _) in LERR, and in CPU the guest's CPU time
# (cpu_busy_us) from before the client was made until it was removed: its
# setup and teardown included, both sides' kernel work.
cmecho_run() {
	local ep=$1 wait=$2 c0 c1
	shift 2
	cpu_busy_us c0
	echo_client $ep "$@" && wait_done $ep $wait
	KV="state=$(<$CFS/$ep/state) $(stats_kv $ep)"
	IFS= read -r LERR <$CFS/$ep/last_error
	LERR=${LERR// /_}
	rm_ep $ep
	cpu_busy_us c1
	CPU=$((c1 - c0))
}

for ((round = 1; round <= ROUNDS; round++)); do
	# 1. Depth-1 RTT: cmecho native echo vs ib_send_lat -R (half a round trip).
	# Each run's CPU time (cpu_busy_us) too, its setup and teardown included:
	# cmecho's from before its client is made until it is removed, both sides'
	# kernel work (completion work items, softirq, rxe's tasks); perftest's
	# from its server listening until both processes have exited, both
	# busy-polling.
	for s in "${SIZES[@]}"; do
		progress "rtt $s B: cmecho"
		n=${LAT_ITERS[$s]}
		cmecho_run lat 300 $s 1 $n -
		record "rtt_$s" cmecho "$KV poll_context=$(<$CFS/esrv$s/poll_context) cpu_busy_us=$CPU"
		progress "rtt $s B: cmecho, both sides on the per-CPU workqueue"
		cmecho_run latwq 300 $s 1 $n - port=$(wport_of $s) poll_context=workqueue
		record "rtt_$s" cmecho_wq "$KV poll_context=workqueue cpu_busy_us=$CPU"
		progress "rtt $s B: cmecho, both sides busy-polled"
		cmecho_run latbp 300 $s 1 $n - port=$(bport_of $s) busy_poll_us=$BUSY_POLL_US
		record "rtt_$s" cmecho_bp "$KV busy_poll_us=$BUSY_POLL_US cpu_busy_us=$CPU"
		progress "rtt $s B: cmecho, both sides on the unbound workqueue"
		cmecho_run latuq 300 $s 1 $n - port=$(uport_of $s) poll_context=unbound_workqueue
		record "rtt_$s" cmecho_uq "$KV poll_context=unbound_workqueue cpu_busy_us=$CPU"
		progress "rtt $s B: ib_send_lat -R"
		out=$(perftest ib_send_lat -s $s -n $n)
		line=$(perftest_line $s <<<"$out")
		# bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
		read -r _ iters tmin tmax ttyp tavg _ p99 p999 <<<"$line"
		record "rtt_$s" ib_send_lat "t_min_us=$tmin t_max_us=$tmax t_typical_us=$ttyp t_avg_us=$tavg t_p99_us=$p99 t_p999_us=$p999 iters=$iters cpu_busy_us=${out##*cpu_busy_us=}"
	done
	# 1b. Where a depth-1 echo's time goes: the kernel's rdma_core:cq_process
	# event gives, for each poll of a CQ, how long its poll context took to
	# wake up after the CQ event (the default's, softirq, then the core's
	# per-CPU workqueue); the time is stamped by cq_schedule (and
	# cq_reschedule), enabled with it. Both sides' CQs are in the trace; polls
	# and wake-ups are counted per echo. The workqueue events give, per
	# workqueue, how many work items ran and how long each waited from being
	# queued to running: rxe's tasks (rxe_wq), the core's CQ work, cmecho's
	# deferred completion work (cmecho_comp). The same for a 64 B rping
	# protocol run of cmecho against cmecho, per ping, and for ib_send_lat,
	# per iteration: rxe's waits there are what perftest's round trip pays.
	# The default and ib_send_lat at every size, the rest at 64 B; then, per
	# message on the wire, pipelined runs (depth 64, PROF_BW_N echoes) of
	# cmecho and of ib_send_bw -b, at every size.
	profs=(cmecho:64 cmecho_wq:64 rping:64 ib_send_lat:64)
	for s in "${SIZES[@]}"; do [ $s = 64 ] || profs+=(cmecho:$s ib_send_lat:$s); done
	for s in "${SIZES[@]}"; do profs+=(cmecho_bw:$s ib_send_bw:$s); done
	# The events are enabled once for all the profile runs, and disabled
	# after them: enabling or disabling an event patches its call sites live
	# (process_one_work's among them, run all the time), and under TCG such a
	# patch has ended in a panic ("Oops: int3" in process_one_work, in the
	# second round of a run that toggled them around each profile run).
	# Between runs only tracing_on changes, which patches nothing.
	events=(rdma_core/cq_schedule rdma_core/cq_reschedule rdma_core/cq_process
		workqueue/workqueue_queue_work workqueue/workqueue_execute_start workqueue/workqueue_execute_end
		irq/softirq_entry irq/softirq_exit)
	if [ -d $TRACEFS/events/rdma_core/cq_process ]; then
		echo 0 >$TRACEFS/tracing_on
		echo 32768 >$TRACEFS/buffer_size_kb
		for e in "${events[@]}"; do echo 1 >$TRACEFS/events/$e/enable; done
	else
		profs=()
	fi
	for prof in "${profs[@]}"; do
		tool=${prof%:*} s=${prof#*:}
		progress "profile: wake-ups in a $s B depth-1 echo, rping ping or round trip ($tool)"
		echo >$TRACEFS/trace
		echo 1 >$TRACEFS/tracing_on
		case $tool in
		cmecho) echo_client prof $s 1 ${LAT_ITERS[$s]} - ;;
		cmecho_wq) echo_client prof $s 1 ${LAT_ITERS[$s]} - port=$(wport_of $s) poll_context=workqueue ;;
		rping) endpoint $NS_B prof role=client mode=rping addr=$ADDR_A port=7310 size=$s count=500 enable=1 ;;
		ib_send_lat) out=$(perftest ib_send_lat -s $s -n ${LAT_ITERS[$s]}) ;;
		cmecho_bw) echo_client prof $s $BW_DEPTH ${PROF_BW_N[$s]} - ;;
		ib_send_bw) out=$(perftest ib_send_bw -b -s $s -t $BW_DEPTH -n ${PROF_BW_N[$s]} --report_gbits) ;;
		esac && { [ ${tool#ib_send_} != $tool ] || wait_done prof 300; }
		echo 0 >$TRACEFS/tracing_on
		# "wake-up took N [us] from interrupt" (after a CQ event) or "from
		# reschedule" (a poll that used up its budget and queued itself again).
		wake=$(sed -n 's/.*cq_process: .*wake-up took \([0-9]*\) \[us\] from \([a-z]*\).*/\1 \2/p' $TRACEFS/trace |
			sort -n | awk '$2 == "interrupt" { v[++n] = $1; sum += $1 } $2 != "interrupt" { re++ }
				END { if (n) printf "polls=%d reschedules=%d wake_sum_us=%d wake_p50_us=%d wake_p99_us=%d",
					n, re, sum, v[int((n + 1) / 2)], v[int((n * 99 + 99) / 100)] }')
		# Per workqueue W: wq_W_n work items run, wq_W_us their waits in all
		# (queued to running), wq_W_run_us their running time in all (start
		# to end: CPU time, but for what preempts them). The timestamp is the
		# field before the event's name; a work item is pending from its
		# queueing to its start.
		wqs=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^workqueue_(queue_work|execute_start|execute_end):$/) break
				if (i > NF) next
				ts = $(i - 1); sub(/:$/, "", ts)
				if ($i == "workqueue_queue_work:") {
					w = ""; q = ""
					for (j = i + 1; j <= NF; j++) {
						if ($j ~ /^struct=/) w = substr($j, 8)
						if ($j ~ /^workqueue=/) q = substr($j, 11)
					}
					if (w != "" && !(w in t)) { t[w] = ts; wq[w] = q }
					next
				}
				w = $(i + 3); sub(/:$/, "", w)
				if ($i == "workqueue_execute_start:") {
					if (w in t) {
						q = wq[w]; n[q]++; us[q] += (ts - t[w]) * 1e6
						delete t[w]; delete wq[w]; st[w] = ts; sq[w] = q
					}
				} else if (w in st) { run[sq[w]] += (ts - st[w]) * 1e6; delete st[w]; delete sq[w] } }
			END { for (q in n) printf " wq_%s_n=%d wq_%s_us=%d wq_%s_run_us=%d", q, n[q], q, us[q], q, run[q] }' $TRACEFS/trace)
		# Per softirq action A: sirq_A_n runs, sirq_A_us their time in all,
		# entry to exit on the same CPU (the CPU is the [NNN] field). A
		# softirq run at the end of a work item's bottom-half section counts
		# in the work item's running time too.
		sirq=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^softirq_(entry|exit):$/) break
				if (i > NF) next
				c = ""; for (j = 1; j < i; j++) if ($j ~ /^\[[0-9]+\]$/) c = $j
				ts = $(i - 1); sub(/:$/, "", ts)
				a = $(i + 2); gsub(/^\[action=|\]$/, "", a)
				if ($i == "softirq_entry:") { st[c] = ts; sa[c] = a }
				else if ((c in st) && sa[c] == a) { n[a]++; us[a] += (ts - st[c]) * 1e6; delete st[c] } }
			END { for (a in n) printf " sirq_%s_n=%d sirq_%s_us=%d", a, n[a], a, us[a] }' $TRACEFS/trace)
		lost=$(cat $TRACEFS/per_cpu/cpu*/stats | awk '/^overrun:/ { s += $2 } END { print s + 0 }')
		if [ $tool = ib_send_lat ]; then
			read -r _ iters _ _ _ tavg _ <<<"$(perftest_line $s <<<"$out")"
			record profile $tool "size=$s state=done trace_lost=$lost$wqs$sirq pings=$iters t_avg_us=$tavg"
			continue
		elif [ $tool = ib_send_bw ]; then
			# Its iterations count both directions (section 2c).
			read -r _ iters _ <<<"$(perftest_line $s <<<"$out")"
			record profile $tool "size=$s state=done trace_lost=$lost$wqs$sirq pings=$iters"
			continue
		fi
		record profile $tool "size=$s state=$(<$CFS/prof/state) poll_context=$(<$CFS/prof/poll_context) trace_lost=$lost $wake$wqs$sirq $(stats_kv prof)"
		rm_ep prof
	done
	if [ ${#profs[@]} -gt 0 ]; then
		for e in "${events[@]}"; do echo 0 >$TRACEFS/events/$e/enable; done
	fi

	# 2. Many in flight: cmecho (depth 64, 3 s) vs ib_send_bw -R -b (tx depth 64),
	# each run's CPU time as in 1.
	for s in "${SIZES[@]}"; do
		progress "pipelined $s B x $BW_DEPTH: cmecho"
		cmecho_run bw 120 $s $BW_DEPTH - $BW_MS
		record "bw_$s" cmecho "$KV cpu_busy_us=$CPU"
		progress "pipelined $s B x $BW_DEPTH: ib_send_bw -R -b"
		out=$(perftest ib_send_bw -b -s $s -t $BW_DEPTH -D $((BW_MS / 1000)) --report_gbits)
		line=$(perftest_line $s <<<"$out")
		# bytes iters bw_peak bw_avg msgrate
		read -r _ iters _ gbps mpps <<<"$line"
		record "bw_$s" ib_send_bw "iters=$iters gbit_s=$gbps mpps=$mpps cpu_busy_us=${out##*cpu_busy_us=}"
	done
	# 2b. Many connections: one client endpoint's AGG_CONNS connections of depth
	# AGG_DEPTH at once, for AGG_MS, against the same servers (their depth,
	# BW_DEPTH, takes AGG_DEPTH; max_conns' default, 256, takes AGG_CONNS; each
	# connection holds 2 x BW_DEPTH x size bytes of buffers there, 32 MiB for
	# 64 of 4 KiB, within their mem_budget_kib), vs ib_send_bw -R -b -q with as
	# many QPs of that tx depth; each run's CPU time as in 1.
	for s in "${AGG_SIZES[@]}"; do
		progress "$AGG_CONNS connections, $s B x $AGG_DEPTH: cmecho"
		cmecho_run agg 120 $s $AGG_DEPTH - $AGG_MS clients=$AGG_CONNS
		record "agg_$s" cmecho "conns=$AGG_CONNS depth=$AGG_DEPTH $KV last_error=$LERR cpu_busy_us=$CPU"
		progress "$AGG_CONNS connections, $s B x $AGG_DEPTH: ib_send_bw -R -b -q $AGG_CONNS"
		# -r: with its default receive depth, 512 for each of 64 QPs, its
		# receive CQ would take 32768 entries, one more than rxe's max_cqe
		# (2^15 - 1): it could not start ("Couldn't create a receiver CQ").
		out=$(perftest ib_send_bw -b -q $AGG_CONNS -s $s -t $AGG_DEPTH -r $((4 * AGG_DEPTH)) \
			-D $((AGG_MS / 1000)) --report_gbits)
		line=$(perftest_line $s <<<"$out")
		# bytes iters bw_peak bw_avg msgrate
		read -r _ iters _ gbps mpps <<<"$line"
		record "agg_$s" ib_send_bw "qps=$AGG_CONNS depth=$AGG_DEPTH rx_depth=$((4 * AGG_DEPTH)) iters=$iters gbit_s=$gbps mpps=$mpps cpu_busy_us=${out##*cpu_busy_us=}"
	done
	# 3. The rping protocol, 64 B: time per ping. cmecho's client times its run
	# from establishment to the last echo; a stock client is timed from the shell
	# at two counts, and the difference divided, so that its start and connection
	# setup cancel out.
	progress "rping: cmecho <-> cmecho"
	endpoint $NS_B rcli role=client mode=rping addr=$ADDR_A port=7310 size=64 count=500 enable=1 &&
		wait_done rcli 300
	record rping cmecho_cmecho "state=$(<$CFS/rcli/state) $(stats_kv rcli)"
	rm_ep rcli
	progress "rping: stock client -> cmecho server"
	a=$(stock_client 7310 50) && b=$(stock_client 7310 550) &&
		record rping stock_cmecho "us_50=$a us_550=$b"
	progress "rping: stock <-> stock"
	a=$(stock_pair 50) && b=$(stock_pair 550) &&
		record rping stock_stock "us_50=$a us_550=$b"

	# 4. CM setup, each step for all connections at once, against the rping
	# server: the cmtime sample (at_once=1) vs rdma-core's cmtime. Per step,
	# its wall time over all connections divided by their number, in µs.
	# Then accepts per second: the same rdma-core cmtime client against
	# rdma-core's cmtime server, whose connect step (all REQs sent at once,
	# until the last connection is established) beside the one against
	# cmecho's server gives each server's accept rate.
	for c in "${CM_CONNS[@]}"; do
		progress "CM setup, $c connections: cmecho_cmtime at_once=1"
		mark=$(dmesg | wc -l)
		# Where each release's time goes: the sample's cmecho_release events,
		# enabled as it loads, read before it unloads (which empties the
		# buffer of events of its own).
		echo >$TRACEFS/trace
		echo "cmecho_cmtime:cmecho_release:mod:cmecho_cmtime" >>$TRACEFS/set_event
		echo 1 >$TRACEFS/tracing_on
		in_ns $NS_B timeout 600 insmod "$CMTIME_KO" addr=$ADDR_A port=7310 conns=$c at_once=1
		log=$(dmesg | tail -n +$((mark + 1)) | grep 'cmecho_cmtime:')
		printf '# round %s: cmecho_cmtime conns=%s at_once=1\n%s\n' "$round" $c "$log" >>"$OUT/cmtime.log"
		rel=$(grep ' cmecho_release: ' $TRACEFS/trace | awk '
			{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] ~ /_us$/) s[kv[1]] += kv[2] }; n++ }
			END { printf "releases=%d ", n; for (k in s) printf "%s=%.1f ", k, s[k] / n }')
		echo 0 >$TRACEFS/tracing_on
		echo >$TRACEFS/set_event
		rmmod cmecho_cmtime 2>/dev/null
		record "cm_$c" release "$rel"
		# "N of M connections to ..." and "step NAME total T per_conn ...": T / N.
		kv=$(echo "$log" | awk '
			/ connections to / { for (i = 2; i <= NF; i++) if ($i == "of") ok = $(i - 1) }
			/ step [a-z_]+ total / { for (i = 1; i < NF; i++) { if ($i == "step") n = $(i + 1); if ($i == "total") tot[n] = $(i + 1) }; order[++k] = n }
			END { printf "ok=%d ", ok; for (j = 1; j <= k; j++) if (ok > 0) printf "%s=%.2f ", order[j], tot[order[j]] / ok }')
		record "cm_$c" cmecho "$kv"
		progress "CM setup, $c connections: cmtime"
		log=$(in_ns $NS_B timeout 600 cmtime -s $ADDR_A -p 7310 -c $c 2>&1)
		printf '# round %s: cmtime -c %s\n%s\n' "$round" $c "$log" >>"$OUT/cmtime.log"
		record "cm_$c" cmtime "$(cmtime_kv "$log")"
		progress "CM setup, $c connections: cmtime against rdma-core's cmtime server"
		# nsenter runs timeout in its place: the TERM below reaches the
		# server, which serves until it gets one.
		nsenter --net="/run/netns/$NS_A" timeout 600 stdbuf -oL cmtime -b $ADDR_A -p 7312 -c $c \
			>>"$OUT/cmtime-server.log" 2>&1 &
		srv=$!
		wait_for 600 cm_listening 7312
		log=$(in_ns $NS_B timeout 600 cmtime -s $ADDR_A -p 7312 -c $c 2>&1)
		printf '# round %s: cmtime -c %s against cmtime -b\n%s\n' "$round" $c "$log" >>"$OUT/cmtime.log"
		kill $srv 2>/dev/null
		wait $srv 2>/dev/null
		wait_for 600 eval '! cm_listening 7312'
		record "cm_$c" cmtime_server "$(cmtime_kv "$log")"
	done

	# 5. Dead-peer detection: a depth-1 echo runs, then the client's egress is cut
	# (netem 100 % loss: rxe believes the packet left and its retry timer runs).
	# The qdisc is added once, losing nothing, before the clients start, and
	# the cut changes its loss: adding a qdisc while rxe transmits fails the
	# QP at once (its SEND flushed, before any retry), another fault.
	tc -n $NS_B qdisc add dev vb root netem loss 0%
	for t in "${DETECT_T[@]}"; do
		for r in "${DETECT_RETRY[@]}"; do
			progress "detection T=$t retry_count=$r"
			theory_us=$(((r + 1) * 4096 * (1 << t) / 1000))
			echo_client det 64 1 - 600000 ack_timeout=$t retry_count=$r && running_with_echoes det
			# A small T can end the connection before any cut (an ACK late by
			# more than the timeout on every try): recorded as such.
			read -r pre <"$CFS/det/state"
			pre_pings=$(ep_get det stats pings)
			loss_set 100
			t0=$(now_us)
			end=$((t0 + 3 * theory_us + 20000000))
			while :; do
				read -r st <"$CFS/det/state"
				[ "$st" = error ] && break
				[ "$(now_us)" -lt $end ] || break
				nap 0.005
			done
			t1=$(now_us)
			record detect cmecho "t=$t retry=$r theory_us=$theory_us precut=$pre precut_pings=$pre_pings shell_us=$((t1 - t0)) state=$st $(stats_kv det) last_error=$(tr ' ' _ <$CFS/det/last_error)"
			loss_set 0
			rm_ep det
		done
	done

	# 6. Loss, on the same qdisc: echoes all verified, and what each T costs in RTT.
	for t in "${LOSS_T[@]}"; do
		for p in "${LOSS_PCT[@]}"; do
			progress "loss $p % at T=$t"
			loss_set $p
			echo_client loss 64 1 - $LOSS_MS ack_timeout=$t && wait_done loss 180
			record loss cmecho "t=$t loss=$p state=$(<$CFS/loss/state) $(stats_kv loss)"
			loss_set 0
			rm_ep loss
		done
	done

	# 6b. The ack-timeout advisor, per one-way delay on the client's egress: a
	# depth-1 run at the default T measures the path and suggests a T; a
	# clean run at that T, on the same path, shows whether it retransmitted
	# (rxe's counters before and after).
	for d in "${ADVISE_DELAY_MS[@]}"; do
		tc -n $NS_B qdisc change dev vb root netem delay ${d}ms loss 0%
		progress "advisor: ${d} ms delay, measure"
		echo_client adv 64 1 - $ADVISE_MS && wait_done adv 180
		sug=$(ep_get adv stats suggested_ack_timeout)
		record advise_measure cmecho "delay_ms=$d state=$(<$CFS/adv/state) $(stats_kv adv)"
		rm_ep adv
		progress "advisor: ${d} ms delay, at T=$sug"
		before=$(rxe_retries before_)
		st=not_run
		if [[ $sug =~ ^[0-9]+$ ]]; then
			echo_client adv 64 1 - $ADVISE_MS ack_timeout=$sug && wait_done adv 180
			read -r st <"$CFS/adv/state"
		fi
		record advise_run cmecho "delay_ms=$d t=$sug state=$st $(stats_kv adv) $before $(rxe_retries after_)"
		rm_ep adv
	done
	tc -n $NS_B qdisc del dev vb root
done

# 7. The other fault, last and on a fresh network each time: the link of the
# client's veth end goes down for 15 s. What follows a link flap is recorded
# too: a new connection over the same rxe links.
for ((round = 1; round <= ROUNDS; round++)); do
	progress "link down instead of loss: T=14 retry_count=1, 15 s"
	for d in "$CFS"/*/; do [ -d "$d" ] && rmdir "$d"; done
	net_setup || { echo "bench: network setup failed"; exit 1; }
	endpoint $NS_A esrv64 role=server mode=echo addr=$ADDR_A port=$(port_of 64) depth=1 size=64 enable=1 || exit 1
	echo_client det 64 1 - 600000 ack_timeout=14 retry_count=1 && running_with_echoes det
	read -r pre <"$CFS/det/state"
	ip -n $NS_B link set vb down
	t0=$(now_us)
	state_is det error 150
	t1=$(now_us)
	record detect_link_down cmecho "t=14 retry=1 precut=$pre shell_us=$((t1 - t0)) state=$(<$CFS/det/state) $(stats_kv det) last_error=$(tr " " _ <$CFS/det/last_error)"
	ip -n $NS_B link set vb up
	rm_ep det
	wait_for 600 in_ns $NS_B ping -c 1 -W 1 $ADDR_A
	progress "after the link flap: a new connection, 10 echoes"
	echo_client after 64 1 10 - && wait_done after 60
	record after_link_flap cmecho "state=$(<$CFS/after/state) $(stats_kv after) last_error=$(tr " " _ <$CFS/after/last_error)"
	rm_ep after
done
dmesg >"$OUT/dmesg.txt"
echo "bench: done in $(((${EPOCHREALTIME/./} - ${t_start/./}) / 1000000)) s, $(wc -l <"$RAW") measurements"
