#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A misbehaving peer (hostile_peer, over librdmacm) against cmecho. As an echo
# server it sends echoes twice, a message nobody asked for, short and corrupted
# echoes to cmecho's echo-mode client: each fails that one connection with a
# reason in last_error; copies sent right behind the last echo are ignored.
# A peer that never answers fails the client (echo or rping) echo_timeout_ms
# after its message was acknowledged; if it then dies, the client's
# zero-length RDMA WRITE probe detects it by the ack timeout, even while
# every allocation through cmecho fails. A client that
# connects and then goes silent, its host as if dead, gets its connection
# probed after 10 s idle and ended by the probe's retries.
# As a client it asks to connect and goes away before the connection is
# established, against a server with max_conns: the failed connections are
# released; a request whose hello (size and depth) is missing, of another
# version, malformed or too big is rejected with the server's limits;
# holding the server's replies without the RTU, its ids kept, it
# gets each connection closed accept_timeout_ms after the accept, while an
# honest client is served; more held at once than the default max_conns get
# the excess rejected. More connections than a server's memory budget
# holds are rejected. As an rping client it breaks the protocol with its first message
# (15 or 17 bytes, size 0 or 1 MiB, a wrong rkey, two at once): the rping
# server ends that connection with a reason, serves a stock rping afterwards,
# and holds no more RDMA resources than before. Nothing else: no kernel-log
# report, no cm_id left behind, and a well-behaved run right after is served.
# The same peer answering correctly is the control that it is a working echo
# server.
. "$(dirname "$0")/lib.sh"

PEER=$SELFTEST_DIR/hostile_peer

# RDMA resources of cmecho, by kind: "cm_id=N qp=N cq=N pd=N mr=N".
cmecho_res() {
	local k
	for k in cm_id qp cq pd mr; do
		printf '%s=%s ' $k "$(res_of $k cmecho -c)"
	done
}

# res_grew BEFORE AFTER N: each kind in AFTER is at least N above BEFORE.
res_grew() {
	local -a b=($1) a=($2)
	local i
	[ ${#b[@]} = 5 ] && [ ${#a[@]} = 5 ] || return 1
	for i in 0 1 2 3 4; do
		[ "${a[i]#*=}" -ge $((${b[i]#*=} + $3)) ] || return 1
	done
}

ktap_print_header
ktap_set_plan 34
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

# peer_run MODE PORT EP [KNOB...]: the peer in namespace a, cmecho's client EP
# in b (with KNOB...); the client's final state and last_error are left in
# STATE and LERR, the peer's exit status in PEER_RC.
peer_run() {
	local mode=$1 port=$2 ep=$3 pid
	shift 3
	ip netns exec $NS_A "$PEER" server $ADDR_A $port $mode 120 >/tmp/peer_$mode.log 2>&1 &
	pid=$!
	wait_for 600 cm_listening $port || ktap_print_msg "$mode: the peer is not listening"
	endpoint $NS_B $ep role=client mode=echo addr=$ADDR_A port=$port count=20 depth=4 \
		"$@" enable=1
	wait_done $ep 180 || ktap_print_msg "$ep: not done or error after 180 s"
	STATE=$(<$CFS/$ep/state)
	LERR=$(<$CFS/$ep/last_error)
	ep_diag $ep
	rmdir $CFS/$ep
	wait $pid
	PEER_RC=$?
	sed "s/^/# peer $mode: /" /tmp/peer_$mode.log
	ktap_print_msg "peer $mode: exit $PEER_RC"
}

# The client's CQ in softirq (poll_context), where it verifies the echoes
# and sends the next messages; the last echo finishes the run from cmecho's
# workqueue.
peer_run good 7300 good poll_context=softirq
ktap_check "control: the peer echoing correctly serves 20 verified echoes (client in softirq)" \
	test "$STATE" = done -a "$PEER_RC" = 0

# One with the client's CQ busy-polled (busy_poll_us), one on the core's
# per-CPU workqueue, two in softirq (poll_context: the client's fast path
# hands the message nobody asked for and the corrupted echo, having done
# nothing of them, to cmecho's workqueue, in order): the same checks.
port=7301
for mode in dup unsolicited short corrupt; do
	case $mode in
	dup) knob=busy_poll_us=200 ;;
	unsolicited | corrupt) knob=poll_context=softirq ;;
	*) knob=poll_context=workqueue ;;
	esac
	peer_run $mode $port $mode $knob
	case $LERR in
	*"verify error"* | *"protocol violation"*) reason=1 ;;
	*) reason=0 ;;
	esac
	ktap_check "$mode echoes ($knob): the connection fails with a reason in last_error" \
		test "$STATE" = error -a $reason = 1
	port=$((port + 1))
done

# Four copies of the last echo right behind it: they arrive when the client
# has all it asked for and its close is under way (in the same completion
# batch, as a rule), and must be ignored: the run is done, nothing more.
# The client in softirq: its fast path hands the last echo, and whatever
# comes behind it, to cmecho's workqueue.
peer_run burst 7305 burst poll_context=softirq
ktap_check "extra echoes right behind the last one: ignored, the run is done" \
	test "$STATE" = done

# silent_run EP PORT KNOB...: the peer in namespace a receives every message
# (its device acknowledges each) and answers none; cmecho's client EP in b,
# with KNOB..., waits for an answer with nothing of its own outstanding.
# Returns once the peer got the first message; the peer's pid is in PEER_PID.
silent_run() {
	local ep=$1 port=$2
	shift 2
	ip netns exec $NS_A "$PEER" server $ADDR_A $port silent 60 >/tmp/peer_silent.log 2>&1 &
	PEER_PID=$!
	wait_for 600 cm_listening $port || ktap_print_msg "silent: the peer is not listening"
	endpoint $NS_B $ep role=client addr=$ADDR_A port=$port "$@" enable=1 &&
		wait_for 600 grep -q "got a message" /tmp/peer_silent.log
}
silent_end() {
	ep_diag $1
	ktap_print_msg "$1: connections: $(tr '\n' ';' <$CFS/$1/connections)"
	rmdir $CFS/$1
	kill $PEER_PID 2>/dev/null
	wait $PEER_PID
	sed 's/^/# peer silent: /' /tmp/peer_silent.log
}

# mute_check EP PORT WHO MSG KNOB...: the silent peer stays alive, its device
# acknowledging each message and each probe; client EP (KNOB...,
# echo_timeout_ms 2000) gives up 2 s after the acknowledgement, with MSG in
# last_error, and does not wait for the end of its run (its count).
mute_check() {
	local ep=$1 port=$2 who=$3 msg=$4 t0=$SECONDS
	shift 4
	silent_run $ep $port "$@" echo_timeout_ms=2000
	wait_done $ep 60
	ktap_check "$who never answers: the client fails echo_timeout_ms later (here $((SECONDS - t0)) s), saying why" \
		eval '[ "$(<$CFS/$ep/state)" = error ] && grep -q "$msg" $CFS/$ep/last_error'
	silent_end $ep
}

# The echo client in softirq: its fast path stamps the message's
# acknowledgement, which the watch reads in process context.
mute_check mute 7306 "an echo peer" "no echo of message 0 within echo_timeout_ms 2000" \
	mode=echo count=20 depth=1 poll_context=softirq

# The same peer, then the path cut: the client has nothing outstanding but
# its keepalive probe, and detects the dead peer through the probe's retries,
# as fast as the ack timeout says (T=14, 2 retries: 201 ms in theory), long
# before the default echo_timeout_ms (30 s). The qdisc is in place before
# the run (see ack_timeout.sh); the cut changes its loss. From the cut on,
# every allocation through cmecho's code fails (failslab_on): only the
# connection's watch, run from the endpoint's timer, can post the probe, so
# the watch, the probe and the failure's report must need no memory.
tc -n $NS_B qdisc add dev vb root netem loss 0%
silent_run dead 7307 mode=echo count=20 depth=1 ack_timeout=14 retry_count=2 &&
	failslab_on &&
	tc -n $NS_B qdisc change dev vb root netem loss 100%
wait_done dead 20
ktap_print_msg "dead: allocations failed through cmecho meanwhile: $(failslab_hits)"
failslab_off
us=$(ep_get dead stats detect_us)
ktap_print_msg "dead: detection as the module saw it: ${us:-none} us (theory 201327 us)"
ktap_check "a peer that never echoes and then dies, while cmecho cannot allocate: the keepalive probe's retries detect it" \
	eval '[ "$(<$CFS/dead/state)" = error ] &&
		grep -q "probe failed: transport retry counter exceeded" $CFS/dead/last_error &&
		[ "${us:-0}" -gt 0 ] && [ "$us" -lt 10000000 ]'
tc -n $NS_B qdisc del dev vb root
silent_end dead

# The rping client waits for the server's go-ahead the same way.
mute_check rmute 7308 "an rping server" "ping 0: no answer within echo_timeout_ms 2000" \
	mode=rping count=5

# idle_start EP MODE PORT [KNOB]: the peer connects to server EP (MODE) and
# sends nothing; its pid is added to IDLE_PIDS.
idle_start() {
	endpoint $NS_A $1 role=server mode=$2 addr=$ADDR_A port=$3 ack_timeout=14 $4 enable=1
	ip netns exec $NS_B "$PEER" rping $ADDR_A $3 idle >/tmp/peer_$1.log 2>&1 &
	IDLE_PIDS+=" $!"
}
# idle_end EP MODE: server EP's connection was probed once it had been idle
# for 10 s, and ended when the probe was not acknowledged 10 s later (the
# peer's connect request asked for retry count 7, which rxe retries for
# ever): the peer does not hold it.
idle_end() {
	local ep=$1 mode=$2
	wait_for 600 grep -q "probe not acknowledged within 10000 ms" $CFS/$ep/last_error
	ktap_print_msg "$ep: $((SECONDS - t_cut)) s after the cut; connections: $(tr '\n' ';' <$CFS/$ep/connections)"
	ep_diag $ep
	ktap_check "$mode server: a client that went silent once connected is probed after 10 s idle, its connection ended 10 s later" \
		eval 'grep -q "probe not acknowledged within 10000 ms" $CFS/$ep/last_error &&
			poll 100 all_closed $ep && [ "$(ep_get $ep stats errors)" -ge 1 ]'
	rmdir $CFS/$ep
}
# Two servers, an echo one in softirq (its probe, and the probe's failure, go
# to process context, the way a softirq CQ defers what its fast path leaves)
# and an rping one on the unbound workqueue, each with a peer
# connected; once both are established, their namespace's egress is cut, as
# if their host had died. One cut, one wait of 20 s for both.
tc -n $NS_B qdisc add dev vb root netem loss 0%
IDLE_PIDS=
idle_start idle_echo echo 7311 poll_context=softirq
idle_start idle_rping rping 7312 poll_context=unbound_workqueue
wait_for 600 grep -q "idle: established" /tmp/peer_idle_echo.log &&
	wait_for 600 grep -q "idle: established" /tmp/peer_idle_rping.log &&
	tc -n $NS_B qdisc change dev vb root netem loss 100%
t_cut=$SECONDS
idle_end idle_echo echo
idle_end idle_rping rping
tc -n $NS_B qdisc del dev vb root
# shellcheck disable=SC2086
kill $IDLE_PIDS 2>/dev/null
# shellcheck disable=SC2086
wait $IDLE_PIDS
sed 's/^/# peer idle (echo): /' /tmp/peer_idle_echo.log
sed 's/^/# peer idle (rping): /' /tmp/peer_idle_rping.log

# Four connect requests that get a reply and never the RTU: the server's new
# connections fail before they are established. They are released at once and
# do not count against max_conns: two clients are served right after. Both
# checks first need the requests to have happened: the peer had an answer to
# each (exit 0), and the server counted each, accepted (at least the two that
# max_conns lets in on a fresh server) or rejected.
endpoint $NS_A lim role=server addr=$ADDR_A port=7320 max_conns=2 enable=1
ip netns exec $NS_B "$PEER" client $ADDR_A 7320 vanish 4 >/tmp/peer_vanish.log 2>&1
vanish_rc=$?
sed 's/^/# peer vanish: /' /tmp/peer_vanish.log
acc=$(ep_get lim stats connections)
rej=$(ep_get lim stats rejected)
ktap_print_msg "lim: the peer exited $vanish_rc; the server accepted ${acc:-none} requests, rejected ${rej:-none}"
[ "$vanish_rc" = 0 ] && [ "${acc:-0}" -ge 2 ] && [ $((${acc:-0} + ${rej:-0})) -ge 4 ]
vanished=$?
lim_all_closed() { all_closed lim; }
poll 3000 lim_all_closed
ktap_print_msg "lim: connections: $(tr '\n' ';' <$CFS/lim/connections)"
ktap_check "connections failed before established are released" \
	eval '[ $vanished = 0 ] && lim_all_closed'
endpoint $NS_B two role=client addr=$ADDR_A port=7320 clients=2 count=10 enable=1
wait_done two 180
ep_diag two
ktap_check "max_conns 2: two clients served after the failed requests" \
	test $vanished = 0 -a "$(<$CFS/two/state)" = done
rmdir $CFS/two
rmdir $CFS/lim

# Eight requests whose replies the peer holds, its ids kept, never sending the
# RTU, three times in a row: the CM alone would keep each server connection as
# long as the request asks (about 65 s). The server rejects each
# accept_timeout_ms (2 s here) after its accept: the peer sees each reject 1
# to 15 s after the reply (the reply leaves after the accept, the deadline is
# checked every second, and releasing eight connections under TCG takes
# seconds). The server counts and names them, and serves an honest client
# meanwhile, which stays connected for 8 s, past the deadline, and is not
# counted.
endpoint $NS_A hold role=server mode=echo addr=$ADDR_A port=7340 accept_timeout_ms=2000 enable=1
(
	for round in 1 2 3; do
		timeout 90 ip netns exec $NS_B "$PEER" client $ADDR_A 7340 hold 8 40 1 15 || exit
	done
) >/tmp/peer_hold.log 2>&1 &
hold_pid=$!
endpoint $NS_B honest role=client mode=echo addr=$ADDR_A port=7340 duration_ms=8000 enable=1
wait_done honest 180
wait $hold_pid
hold_rc=$?
sed 's/^/# peer hold: /' /tmp/peer_hold.log
ktap_print_msg "hold: the peer exited $hold_rc; accept_timeouts $(ep_get hold stats accept_timeouts); last_error: $(<$CFS/hold/last_error)"
ktap_check "three rounds of eight replies held without the RTU: each rejected accept_timeout_ms after its accept, counted, named" \
	test "$hold_rc" = 0 -a "$(grep -c ' 8 replies held, 8 rejected' /tmp/peer_hold.log)" = 3 \
	-a "$(ep_get hold stats accept_timeouts)" = 24 \
	-a "$(grep -c 'accept_timeout_ms 2000: [1-8] connection(s) not established' $CFS/hold/last_error)" = 1
ep_diag honest
ktap_check "meanwhile an honest client is served for 8 s, not counted" \
	test "$(<$CFS/honest/state)" = done -a "$(ep_get hold stats accept_timeouts)" = 24
hold_all_closed() { all_closed hold; }
poll 3000 hold_all_closed
ktap_check "the held connections are released" hold_all_closed
rmdir $CFS/honest
rmdir $CFS/hold

# More requests held at once than a server's default max_conns (256): the
# server accepts 256 and closes them accept_timeout_ms (20 s here) after the
# accept; it rejects the other 4 at once, and counts them (a request the CM
# sends again is rejected and counted again). The peer's summary
# line gives what it saw: 256 replies, each rejected after it, and 4 requests
# rejected before a reply.
endpoint $NS_A many role=server mode=echo addr=$ADDR_A port=7350 accept_timeout_ms=20000 enable=1
timeout 200 ip netns exec $NS_B "$PEER" client $ADDR_A 7350 hold 260 150 1 120 >/tmp/peer_many.log 2>&1
sed 's/^/# peer hold 260: /' /tmp/peer_many.log | tail -5
line=$(grep 'hold: 260 requests' /tmp/peer_many.log)
ktap_print_msg "many: rejected $(ep_get many stats rejected), accept_timeouts $(ep_get many stats accept_timeouts); last_error: $(<$CFS/many/last_error)"
ktap_check "260 held requests against the default max_conns: 256 accepted and closed after accept_timeout_ms, 4 rejected, counted" \
	test "${line#*260 requests, 256 replies held, 256 rejected}" != "$line" \
	-a "${line%, 4 failed before a reply}" != "$line" \
	-a "$(ep_get many stats rejected)" -ge 4 -a "$(ep_get many stats accept_timeouts)" = 256
# The connections file lists a page of them: count cmecho's QPs instead (the
# other endpoints are gone).
many_released() { [ "$(res_of qp cmecho -c)" = 0 ]; }
poll 3000 many_released
ktap_check "the 256 held connections are released: cmecho holds no QP" many_released
rmdir $CFS/many

# The memory budget: 1 MiB of buffers per echo connection (depth 8, 64 KiB),
# room for two. A third connection is rejected with a reason and counted; a
# client whose own connections would not fit is refused at enable.
endpoint $NS_A mem role=server mode=echo depth=8 size=65536 addr=$ADDR_A port=7330 \
	mem_budget_kib=2048 enable=1
endpoint $NS_B three role=client mode=echo depth=8 size=65536 addr=$ADDR_A port=7330 \
	clients=3 count=10000000 enable=1
key_is mem stats rejected 1 3000 && key_is mem stats active 2 3000
ep_diag mem
ktap_check "mem_budget_kib 2048: two 1 MiB connections served, the third rejected and counted, with a reason" \
	test "$(ep_get mem stats rejected)" = 1 -a "$(ep_get mem stats active)" = 2 \
	-a "$(grep -c 'mem_budget_kib 2048 reached' $CFS/mem/last_error)" = 1
rmdir $CFS/three
rmdir $CFS/mem
in_ns $NS_B mkdir $CFS/big
echo client >$CFS/big/role; echo echo >$CFS/big/mode; echo 8 >$CFS/big/depth
echo 65536 >$CFS/big/size; echo 3 >$CFS/big/clients; echo 2048 >$CFS/big/mem_budget_kib
echo $ADDR_A >$CFS/big/addr
echo 1 >$CFS/big/enable 2>/tmp/big_err
ktap_print_msg "big: enable: $(</tmp/big_err); last_error: $(<$CFS/big/last_error)"
ktap_check "mem_budget_kib: a client whose connections would not fit is refused (EINVAL), idle" \
	sh -c "grep -q 'Invalid argument' /tmp/big_err && [ \"\$(cat $CFS/big/state)\" = idle ] && grep -q mem_budget_kib $CFS/big/last_error"
rmdir $CFS/big

# The rping-mode server against a client that breaks the protocol.
endpoint $NS_A rsrv role=server addr=$ADDR_A port=7320 enable=1
base=$(cmecho_res)
ktap_print_msg "rping server listening; resources: $base"
# The count's positive control: one connection of cmecho's own rping client
# to that server adds at least 2 of each kind (a cm_id, QP, CQ, PD and MRs on
# each side).
endpoint $NS_B ctl role=client addr=$ADDR_A port=7320 count=1000000 enable=1
key_is rsrv stats active 1 3000
live=$(cmecho_res)
rmdir $CFS/ctl
ktap_print_msg "one rping connection up; resources: $live"
ktap_check "the resource count sees a live connection: 2 more of each kind" \
	res_grew "$base" "$live" 2
key_is rsrv stats active 0 3000
prev=$(<$CFS/rsrv/last_error)
for mode in short long zero huge badkey twice; do
	ip netns exec $NS_B timeout 90 "$PEER" rping $ADDR_A 7320 $mode >/tmp/peer_rping.log 2>&1
	rc=$?
	sed "s/^/# peer rping $mode: /" /tmp/peer_rping.log
	le=$(<$CFS/rsrv/last_error)
	ktap_print_msg "rsrv last_error: $le; state $(<$CFS/rsrv/state)"
	if [ $mode = twice ]; then
		# Out of turn, the second message may end that connection as a
		# protocol violation, or arrive after the first was answered.
		ktap_check "rping client sending two messages at once: that connection ends or carries on, the server still listens" \
			test $rc = 0 -a "$(<$CFS/rsrv/state)" = listening
	else
		# The server ended it: the peer saw it end, or (its one DREQ lost:
		# the CM does not resend it once the server's id is destroyed) the
		# server holds no open connection. Either way with a new reason.
		ended=$rc
		if [ $rc = 2 ] && key_is rsrv stats active 0 300; then
			ktap_print_msg "rping $mode: the peer did not see the end; the server has no open connection"
			ended=0
		fi
		ktap_check "rping client $mode: the server ends that connection with a reason" \
			test $ended = 0 -a -n "$le" -a "$le" != "$prev" -a "$(<$CFS/rsrv/state)" = listening
	fi
	prev=$le
done
ip netns exec $NS_B timeout 120 rping -c -a $ADDR_A -p 7320 -C 10 -V >/tmp/rping.log 2>&1
rc=$?
sed 's/^/# rping: /' /tmp/rping.log | tail -3
ktap_check "afterwards, a stock rping client is served (10 pings, verified)" test $rc = 0
# Closing is asynchronous: up to a minute for the resources to go.
for ((i = 0; i < 60; i++)); do
	now=$(cmecho_res)
	[ "$now" = "$base" ] && break
	nap 1
done
ktap_print_msg "resources now: $now; before: $base"
ktap_check "the rping server holds no more RDMA resources than before" test "$now" = "$base"
rmdir $CFS/rsrv

ktap_check "no cm_id of cmecho is left" no_cmecho_cm_ids

# A peer that refuses 64 connections at once (nothing listens on the port):
# each failure is counted in errors and named in last_error, but the kernel
# log gets them at the kernel's default rate at most (10 in 5 s: over the T
# seconds they take, at most 10 * (T / 5 + 1) lines); the rest are counted as
# logs_suppressed.
logged() { dmesg | grep -c 'cmecho: flood: '; }
lines0=$(logged)
t0=$SECONDS
endpoint $NS_B flood role=client addr=$ADDR_A port=7399 clients=64 enable=1
state_is flood error 600
wait_for 1200 key_is flood stats connect_failed 64 1
t=$((SECONDS - t0))
errs=$(ep_get flood stats errors)
sup=$(ep_get flood stats logs_suppressed)
lines=$(($(logged) - lines0))
ktap_print_msg "64 refused connects in $t s: errors ${errs:-none}, logged $lines, suppressed ${sup:-none}; last_error: $(<$CFS/flood/last_error)"
ktap_check "64 connections refused at once: all counted, at most 10 log lines per 5 s, the rest counted as suppressed" \
	test "${errs:-0}" = 64 -a $((lines + ${sup:-0})) = 64 -a "${sup:-0}" -gt 0 -a $lines -le $((10 * (t / 5 + 1)))
rmdir $CFS/flood

# The hello of an echo client's request is wire input: a request without one,
# of another version, with a size of 0, or above the server's size and depth
# (64 and 1 by default) is rejected, with the server's limits and what it
# refuses in the reject (bit 0 size, 1 depth, 2 version, 3 unreadable), and
# counted; the same request with a good hello gets a reply (the control).
endpoint $NS_A srv role=server mode=echo addr=$ADDR_A port=7310 enable=1
hellos=
for h in good none v2 zero big; do
	hellos+="$(ip netns exec $NS_B timeout 60 "$PEER" client $ADDR_A 7310 hello $h 2>&1 | tr '\n' ' ')"
done
ktap_print_msg "$hellos; rejected $(ep_get srv stats rejected); last_error: $(<$CFS/srv/last_error)"
want="hostile_peer: hello good: replied \
hostile_peer: hello none: rejected (reason 28): refused 0x8: size 64 depth 1 \
hostile_peer: hello v2: rejected (reason 28): refused 0x4: size 64 depth 1 \
hostile_peer: hello zero: rejected (reason 28): refused 0x8: size 64 depth 1 \
hostile_peer: hello big: rejected (reason 28): refused 0x3: size 64 depth 1 "
ktap_check "a request's hello is checked: none, version 2, size 0, too big: rejected with the server's limits, counted" \
	test "$hellos" = "$want" -a "$(ep_get srv stats rejected)" = 4 \
	-a "$(<$CFS/srv/last_error)" = "server: rejected a connect request: size 65536 above the server's 64, depth 256 above the server's 1"

# A well-behaved client is still served, by a cmecho server.
endpoint $NS_B after role=client mode=echo addr=$ADDR_A port=7310 count=20 enable=1
wait_done after 180
ep_diag after
ktap_check "afterwards, a well-behaved client is served" \
	test "$(<$CFS/after/state)" = done -a "$(ep_get after stats verify_errors)" = 0

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
