#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Native echo mode: sizes 1, 64, 4096 and 65536 bytes at depth 1 and 32, every
# echo verified (sequence number and content); a duration-bounded run; the
# stats formats (histogram, percentiles, throughput); each poll context
# (poll_context, busy_poll_us) on both sides; the ack-timeout advisor
# on a plain and a delayed path; and a client asking for a larger size or
# depth than the server accepts, rejected with the reason.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 22
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# The core's rdma_core:cq_alloc events say how each CQ is polled: the
# default, softirq, for the runs below; then each other poll context. (Not
# `rdma res show cq`: iproute2 names the kernel's poll contexts one off, a
# DIRECT CQ as UNBOUND_WORKQUEUE.) No comm recording: see
# tracefs_on in lib.sh.
tracefs_on
echo >$TR/trace
echo 1 >$TR/events/rdma_core/cq_alloc/enable
# polled CTX: how many CQs were allocated with poll context CTX since the
# trace was last cleared; clears it.
polled() {
	local line n=0
	while IFS= read -r line; do
		[[ $line == *" cq_alloc: "*" poll_ctx=$1" ]] && n=$((n + 1))
	done <<<"$(<$TR/trace)"
	echo >$TR/trace
	echo $n
}

endpoint $NS_A srv role=server mode=echo depth=32 size=65536 addr=$ADDR_A enable=1
# What the clients send, for the server's stats: each message once, as it is.
sent_msgs=0
sent_bytes=0
in_flight=0
for size in 1 64 4096 65536; do
	for depth in 1 32; do
		ep=e${size}_$depth
		endpoint $NS_B $ep role=client mode=echo addr=$ADDR_A size=$size depth=$depth count=50 enable=1
		wait_done $ep 180
		ktap_print_msg "$ep: $(<$CFS/$ep/state); $(grep -E '^(pings|bytes|verify_errors|rtt_p50_us|rtt_p99_us|throughput_mbit_s) ' $CFS/$ep/stats | tr '\n' ' ')"
		ktap_check "echo size $size depth $depth: 50 messages, all verified" \
			test "$(<$CFS/$ep/state)" = done -a "$(ep_get $ep stats pings)" = 50 \
			-a "$(ep_get $ep stats verify_errors)" = 0 -a "$(ep_get $ep stats errors)" = 0 \
			-a "$(ep_get $ep stats bytes)" = $((50 * size))
		sent_msgs=$((sent_msgs + 50))
		in_flight=$((in_flight + depth))
		sent_bytes=$((sent_bytes + 50 * size))
		rmdir $CFS/$ep
	done
done
n=$(polled SOFTIRQ)
ktap_print_msg "CQs allocated for softirq polling: $n"
ktap_check "poll_context softirq (the default): the 8 clients' and their server connections' CQs polled in softirq" \
	test $n -ge 16

# pc_run NAME SERVER_KNOBS CLIENT_KNOBS: a 3 s depth-8 echo of 4 KiB
# messages; true when every echo was verified, neither side counted an
# error, and the server echoed every byte the client got back. Leaves the
# server's softirq_pings in SOFT, the client's in CSOFT.
pc_run() {
	endpoint $NS_A ${1}s role=server mode=echo depth=8 size=4096 addr=$ADDR_A port=7175 $2 enable=1
	endpoint $NS_B ${1}c role=client mode=echo addr=$ADDR_A port=7175 size=4096 depth=8 \
		duration_ms=3000 $3 enable=1
	wait_done ${1}c 120
	ktap_print_msg "${1}c: $(<$CFS/${1}c/state); $(grep -E '^(pings|verify_errors|softirq_pings|rtt_min_us|rtt_p50_us|rtt_p99_us) ' $CFS/${1}c/stats | tr '\n' ' ')"
	ktap_print_msg "${1}s: $(grep -E '^(pings|bytes|softirq_pings) ' $CFS/${1}s/stats | tr '\n' ' ')"
	local r=1
	SOFT=$(ep_get ${1}s stats softirq_pings)
	CSOFT=$(ep_get ${1}c stats softirq_pings)
	[ "$(<$CFS/${1}c/state)" = done ] && [ "$(ep_get ${1}c stats pings)" -gt 8 ] &&
		[ "$(ep_get ${1}c stats verify_errors)" = 0 ] && [ "$(ep_get ${1}c stats errors)" = 0 ] &&
		[ "$(ep_get ${1}s stats errors)" = 0 ] &&
		[ "$(ep_get ${1}s stats bytes)" = "$(ep_get ${1}c stats bytes)" ] && r=0
	rmdir $CFS/${1}c $CFS/${1}s
	return $r
}

# wq_run NAME CONTEXT TRACED WHERE: pc_run with poll_context CONTEXT on both
# sides, the core's workqueue WHERE: their CQs allocated as TRACED, none
# echoing in softirq.
wq_run() {
	local ok n
	pc_run $1 poll_context=$2 poll_context=$2
	ok=$?
	n=$(polled $3)
	ktap_print_msg "CQs allocated for $4: $n"
	ktap_check "poll_context $2: both sides' CQs polled on $4, echoes at depth 8 verified, none in softirq" \
		test $ok = 0 -a $n -ge 2 -a "$SOFT" = 0 -a "$CSOFT" = 0
}
wq_run u unbound_workqueue UNBOUND_WORKQUEUE "the core's unbound workqueue"
wq_run w workqueue WORKQUEUE "the core's per-CPU workqueue"

# softirq on both sides: the server's connection posts each echo, and
# reposts each receive, in its CQ's softirq; the client's verifies each
# echo, records its round trip and sends the next message there
# (softirq_pings counts those, on each side); the last echo of the run goes
# to cmecho's workqueue, which finishes it. Echoes verified all the same.
pc_run s poll_context=softirq poll_context=softirq
ok=$?
n=$(polled SOFTIRQ)
ktap_print_msg "CQs allocated for softirq polling: $n; echoes completed in softirq: the server's $SOFT, the client's $CSOFT"
ktap_check "poll_context softirq: both sides' CQs polled in softirq, both echoing there, echoes at depth 8 verified" \
	test $ok = 0 -a $n -ge 2 -a "${SOFT:-0}" -gt 8 -a "${CSOFT:-0}" -gt 8

# busy_poll_us on both sides: each connection's CQ is polled by cmecho's own
# work item, which polls on for 500 us after each completion; the echoes are
# the same, and verified. The client's poller is unbound, its fast path on
# the poller with bottom halves off (poll_context softirq, the default), the
# server's per CPU; both CQs are allocated for direct polling (the core polls
# none of them).
pc_run b "busy_poll_us=500 poll_context=workqueue" busy_poll_us=500
ok=$?
ktap_check "busy_poll_us 500: both sides' CQs polled by cmecho, echoes at depth 8 verified" \
	test $ok = 0 -a "$(polled DIRECT)" -ge 2
echo 0 >$TR/events/rdma_core/cq_alloc/enable

# Wall time from enable to done: at least the 1500 ms (the run starts once
# connected), at most a minute more on a slow guest; and more messages than the
# default count (10) would send.
endpoint $NS_B dur role=client mode=echo addr=$ADDR_A size=64 depth=8 duration_ms=1500
t0=$(date +%s%N)
echo 1 >$CFS/dur/enable
wait_done dur 120
ms=$((($(date +%s%N) - t0) / 1000000))
ktap_print_msg "dur: $(<$CFS/dur/state) $ms ms after enable; pings $(ep_get dur stats pings)"
ktap_check "duration_ms 1500: ends by itself 1500 ms to 61.5 s after enable, past the default count of 10, messages verified" \
	test "$(<$CFS/dur/state)" = done -a $ms -ge 1500 -a $ms -le 61500 \
	-a "$(ep_get dur stats pings)" -gt 10 -a "$(ep_get dur stats verify_errors)" = 0
sent_msgs=$((sent_msgs + $(ep_get dur stats pings | grep . || echo 0)))
in_flight=$((in_flight + 8))
sent_bytes=$((sent_bytes + $(ep_get dur stats bytes | grep . || echo 0)))
ktap_check "stats: min <= p50 <= p99 <= max, histogram and exact samples count every RTT, run_us set" sh -c "
	min=\$(sed -n 's/^rtt_min_us //p' $CFS/dur/stats)
	p50=\$(sed -n 's/^rtt_p50_us //p' $CFS/dur/stats); p99=\$(sed -n 's/^rtt_p99_us //p' $CFS/dur/stats)
	max=\$(sed -n 's/^rtt_max_us //p' $CFS/dur/stats); n=\$(sed -n 's/^pings //p' $CFS/dur/stats)
	k=\$(sed -n 's/^rtt_samples //p' $CFS/dur/stats); run=\$(sed -n 's/^run_us //p' $CFS/dur/stats)
	h=\$(sed -n 's/^rtt_hist_lt_[0-9]*us //p' $CFS/dur/stats | paste -sd+ | bc)
	[ \$min -le \$p50 ] && [ \$p50 -le \$p99 ] && [ \$p99 -le \$max ] && [ \$h -eq \$n ] &&
		[ \$k -eq \$((n < 65536 ? n : 65536)) ] && [ \$run -ge 1500000 ]"

# The ack-timeout advisor in stats: suggested_ack_timeout is the smallest T
# (1..31) whose 4.096 us x 2^T covers twice rtt_p99_us and rtt_max_us; the
# detection bounds are (retry_cnt + 1) x 4.096 us x 2^T in ms rounded up, at
# that T and at qp_attrs' timeout, with qp_attrs' retry_cnt.
advice_holds() {
	local ep=$1 p99 max t qt r need b sb
	p99=$(ep_get $ep stats rtt_p99_us) max=$(ep_get $ep stats rtt_max_us)
	t=$(ep_get $ep stats suggested_ack_timeout)
	qt=$(ep_get $ep qp_attrs timeout) r=$(ep_get $ep qp_attrs retry_cnt)
	b=$(ep_get $ep stats detect_bound_ms) sb=$(ep_get $ep stats suggested_detect_bound_ms)
	ktap_print_msg "$ep: rtt_p99_us $p99 rtt_max_us $max -> suggested_ack_timeout $t (bound $sb ms); qp timeout $qt retry_cnt $r -> detect_bound_ms $b"
	# A "-" (no round trip, no connection) fails the check, not the program.
	for v in "$p99" "$max" "$t" "$qt" "$r"; do
		[[ $v =~ ^[0-9]+$ ]] || return 1
	done
	need=$(((2 * p99 > max ? 2 * p99 : max) * 1000))
	[ "$t" -ge 1 ] && [ "$t" -le 31 ] || return 1
	[ $((4096 << t)) -ge $need ] || [ "$t" = 31 ] || return 1
	[ "$t" = 1 ] || [ $((4096 << (t - 1))) -lt $need ] || return 1
	[ "$sb" = $((((r + 1) * (4096 << t) + 999999) / 1000000)) ] || return 1
	[ "$b" = $((((r + 1) * (4096 << qt) + 999999) / 1000000)) ]
}
# The server keeps 32 receives posted: at depth 1 a client's next message can
# beat the server's repost, and its RNR NAK waits the default min RNR timer
# (655 ms), which a round trip then counts.
endpoint $NS_A adv role=server mode=echo depth=32 addr=$ADDR_A port=7106 ack_timeout=20 enable=1
endpoint $NS_B adv0 role=client mode=echo addr=$ADDR_A port=7106 count=200 enable=1
wait_done adv0 120
ktap_check "advisor: suggested T and detection bounds as the formula gives them from stats and qp_attrs" \
	advice_holds adv0
# 250 ms each way: a 500 ms round trip, which needs T = 18 or more (T = 17 is
# 0.54 s, half of twice 500 ms); the QP's own T (20, 4.3 s) keeps it from
# retransmitting meanwhile.
throttle_on
endpoint $NS_B adv1 role=client mode=echo addr=$ADDR_A port=7106 count=4 ack_timeout=20 enable=1
wait_done adv1 120
throttle_off
delayed_asks_more() {
	advice_holds adv1 || return 1
	[ "$(<$CFS/adv1/state)" = done ] && [ "$(ep_get adv1 stats pings)" = 4 ] &&
		[ "$(ep_get adv1 stats suggested_ack_timeout)" -ge 18 ] &&
		[ "$(ep_get adv1 stats suggested_ack_timeout)" -gt "$(ep_get adv0 stats suggested_ack_timeout)" ]
}
ktap_check "advisor: a path with 250 ms of delay each way suggests a larger T, 18 or more" \
	delayed_asks_more
rmdir $CFS/adv0 $CFS/adv1 $CFS/adv

# A client asking for more than a server accepts (64 bytes, depth 1 here) is
# rejected at connect time with the server's limits, which it names; the
# server counts each rejection and holds nothing for it.
endpoint $NS_A small role=server mode=echo addr=$ADDR_A port=7105 enable=1
ktap_check "size 256 against a server of 64 bytes: rejected, the reason named" \
	refused big1 $ADDR_A 7105 256 1 "size 256 above the server's 64"
ktap_check "depth 8 against a server of depth 1: rejected, the reason named" \
	refused deep8 $ADDR_A 7105 64 8 "depth 8 above the server's 1"
both_refused() {
	refused both $ADDR_A 7105 256 8 "size 256 above the server's 64, depth 8 above the server's 1"
	local r=$?
	ktap_print_msg "small: rejected $(ep_get small stats rejected), connections $(ep_get small stats connections); last_error: $(<$CFS/small/last_error)"
	[ $r = 0 ] && [ "$(ep_get small stats rejected)" = 3 ] && [ "$(ep_get small stats connections)" = 0 ]
}
ktap_check "256 bytes, depth 8 against 64 bytes, depth 1: both named; the server counted 3, accepted none" \
	both_refused
rmdir $CFS/small

# The server counts bytes as a message arrives: exactly what the clients sent.
# It counts a round trip when its echo's send completes; a client that has its
# last echoes closes at once, and the server's sends still waiting for their
# acknowledgement are flushed uncounted: at most one depth per run. Once the
# server has closed every connection, its counts are final.
key_is srv stats active 0 600 || ktap_print_msg "srv: connections still active after 60 s"
srv_pings=$(ep_get srv stats pings)
ktap_print_msg "server: pings $srv_pings, bytes $(ep_get srv stats bytes), errors $(ep_get srv stats errors); the clients sent $sent_msgs messages ($in_flight at most in flight at the ends of runs), $sent_bytes bytes"
ktap_check "server stats count what the clients sent: bytes exactly, round trips less the flushed ends, no error" \
	test "$(ep_get srv stats bytes)" = $sent_bytes -a "${srv_pings:-0}" -le $sent_msgs \
	-a "${srv_pings:-0}" -ge $((sent_msgs - in_flight)) \
	-a "$(ep_get srv stats verify_errors)" = 0 -a "$(ep_get srv stats errors)" = 0
unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
