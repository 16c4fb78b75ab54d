#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# cmecho's tracepoints (Documentation/cmecho.rst, "Tracepoints"), enabled through
# tracefs and checked against what configfs reports for the same run: a native
# echo client's connection states and setup steps, the server's accept, one
# round-trip event per echo with the stats' minimum and maximum, a release per
# connection with each part timed, and a detection
# on a cut path with the ack timeout and retry count the QP got. With the events
# off, a run leaves none.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 11
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

tracefs_on
EV=$TR/events/cmecho

ktap_check "tracefs lists cmecho's five events" eval \
	'[ -d $EV/cmecho_conn_state ] && [ -d $EV/cmecho_cm_step ] && [ -d $EV/cmecho_detect ] && [ -d $EV/cmecho_echo_rtt ] && [ -d $EV/cmecho_release ]'

# trace_read: the trace buffer's text, in TRACE_TEXT, read once from start to
# end. (Not line by line: bash's read on a seekable file reads ahead and seeks
# back, and a seek in tracefs's trace file re-walks the buffer, which has shown
# one event twice and lost the next.)
trace_read() {
	TRACE_TEXT=$(<$TR/trace)
}
# trace_of EVENT ENDPOINT: the fields of each EVENT of ENDPOINT in TRACE_TEXT,
# one event per line (what follows "EVENT: "), in the order emitted.
trace_of() {
	local l
	while IFS= read -r l; do
		[[ $l == *" $1: endpoint=$2 "* ]] && printf '%s\n' "${l#*" $1: "}"
	done <<<"$TRACE_TEXT"
}
# fv NAME LINE: the value of NAME=value in LINE, in REPLY ("" if none). No
# command substitution: each would fork, half a second under TCG.
fv() {
	if [[ $2 =~ (^| )$1=([^ ]*) ]]; then REPLY=${BASH_REMATCH[2]}; else REPLY=; fi
}

echo >$TR/trace
echo 1 >$EV/enable

endpoint $NS_A srv role=server mode=echo depth=1 size=64 addr=$ADDR_A port=7107 enable=1
endpoint $NS_B cli role=client mode=echo addr=$ADDR_A port=7107 size=64 depth=1 count=20 enable=1
wait_done cli 120
ktap_print_msg "cli: $(<$CFS/cli/state); pings $(ep_get cli stats pings) rtt_min_us $(ep_get cli stats rtt_min_us) rtt_max_us $(ep_get cli stats rtt_max_us)"

trace_read
mapfile -t states < <(trace_of cmecho_conn_state cli)
mapfile -t steps < <(trace_of cmecho_cm_step cli)
mapfile -t rtts < <(trace_of cmecho_echo_rtt cli)
mapfile -t srv_states < <(trace_of cmecho_conn_state srv)
mapfile -t srv_steps < <(trace_of cmecho_cm_step srv)
for l in "${states[@]}" "${steps[@]}" "${srv_states[@]}" "${srv_steps[@]}"; do
	ktap_print_msg "$l"
done
ktap_print_msg "cli: ${#rtts[@]} cmecho_echo_rtt events; first: ${rtts[0]:-none}"

# The client's states up to established, each from the one before, on the CM
# events that move them.
want="connecting>addr_resolved:ADDR_RESOLVED route_resolved:ROUTE_RESOLVED established:ESTABLISHED"
got=
prev=connecting
for l in "${states[@]}"; do
	fv from "$l"
	[ "$REPLY" = "$prev" ] || got+=" (from $REPLY)"
	fv to "$l"
	prev=$REPLY
	fv input "$l"
	got+="${got:+ }$prev:$REPLY"
	[ "$prev" = established ] && break
done
got="connecting>${got}"
ktap_print_msg "client states: $got"
ktap_check "cmecho_conn_state: the client went connecting, addr_resolved, route_resolved, established on the CM's events" \
	test "$got" = "$want"

# The five setup steps, in order, each with a duration and no error; all on
# the connection the states named.
fv conn "${states[0]:-}"
conn=$REPLY
seq=
ok=1
for l in "${steps[@]}"; do
	fv step "$l"
	seq+="${seq:+ }$REPLY"
	fv err "$l"
	[ "$REPLY" = 0 ] || ok=0
	fv duration_us "$l"
	[[ $REPLY =~ ^[0-9]+$ ]] || ok=0
	fv conn "$l"
	[ "$REPLY" = "$conn" ] || ok=0
done
ktap_check "cmecho_cm_step: the client's five steps in order, each timed, err=0, on its connection ($conn)" \
	eval '[ "$seq" = "rdma_create_id rdma_resolve_addr rdma_resolve_route rdma_create_qp rdma_connect" ] && [ $ok = 1 ] && [[ $conn =~ ^[0-9]+$ ]]'

srv_ok=0
if [ ${#srv_steps[@]} = 1 ]; then
	fv step "${srv_steps[0]}"
	s1=$REPLY
	fv err "${srv_steps[0]}"
	[ "$s1" = rdma_accept ] && [ "$REPLY" = 0 ] && srv_ok=1
fi
for l in "${srv_states[@]}"; do
	[[ $l == *" to=established input=ESTABLISHED "* ]] && srv_ok=$((srv_ok + 1))
done
ktap_check "cmecho_cm_step and cmecho_conn_state: the server accepted (err=0) and reached established once" \
	test $srv_ok = 2

# One round-trip event per echo the stats counted, of the message's size; the
# stats' minimum and maximum are the events' (in us, rounded up).
n=0 min= max= sz=1
for l in "${rtts[@]}"; do
	fv rtt_ns "$l"
	us=$(((REPLY + 999) / 1000))
	if [ -z "$min" ] || [ $us -lt $min ]; then min=$us; fi
	if [ -z "$max" ] || [ $us -gt $max ]; then max=$us; fi
	fv size "$l"
	[ "$REPLY" = 64 ] || sz=0
	fv conn "$l"
	[ "$REPLY" = "$conn" ] || sz=0
	n=$((n + 1))
done
ktap_print_msg "events: $n round trips, min $min us, max $max us"
ktap_check "cmecho_echo_rtt: one event per echo in stats (20), size 64, on the client's connection" \
	eval '[ $n = "$(ep_get cli stats pings)" ] && [ $n = 20 ] && [ $sz = 1 ]'
ktap_check "cmecho_echo_rtt: the events' minimum and maximum are the stats' rtt_min_us and rtt_max_us" \
	eval '[ "$min" = "$(ep_get cli stats rtt_min_us)" ] && [ "$max" = "$(ep_get cli stats rtt_max_us)" ]'

# Removing the endpoints releases both connections: one cmecho_release each,
# on the connection the states named for the client, every part timed.
rmdir_endpoints
trace_read
mapfile -t rel < <(trace_of cmecho_release cli)
mapfile -t srv_rel < <(trace_of cmecho_release srv)
ktap_print_msg "release: cli ${rel[*]:-none}; srv ${srv_rel[*]:-none}"
rel_ok=0
if [ ${#rel[@]} = 1 ] && [ ${#srv_rel[@]} = 1 ]; then
	rel_ok=1
	fv conn "${rel[0]}"
	[ "$REPLY" = "$conn" ] || rel_ok=0
	for l in "${rel[0]}" "${srv_rel[0]}"; do
		for f in disconnect_us destroy_qp_us free_us destroy_id_us; do
			fv $f "$l"
			[[ $REPLY =~ ^[0-9]+$ ]] || rel_ok=0
		done
	done
fi
ktap_check "cmecho_release: one per connection when the endpoints go, each part timed" test $rel_ok = 1

# A detection: the path cut under a running client (as ack_timeout.sh does).
echo >$TR/trace
tc -n $NS_B qdisc add dev vb root netem loss 0%
endpoint $NS_A srv role=server mode=echo depth=1 size=64 addr=$ADDR_A port=7107 enable=1
endpoint $NS_B cut role=client mode=echo addr=$ADDR_A port=7107 depth=1 size=64 \
	duration_ms=600000 ack_timeout=14 retry_count=2 enable=1
if wait_for 1200 pings_over cut 20 && state_is cut running 1; then
	tc -n $NS_B qdisc change dev vb root netem loss 100%
fi
wait_done cut 30
trace_read
mapfile -t det < <(trace_of cmecho_detect cut)
us=$(ep_get cut stats detect_us)
ktap_print_msg "cut: $(<$CFS/cut/state); detect_us $us; events: ${det[*]:-none}"
d_t= d_r= d_us= d_st=
if [ ${#det[@]} = 1 ]; then
	fv ack_timeout "${det[0]}"
	d_t=$REPLY
	fv retry_count "${det[0]}"
	d_r=$REPLY
	fv detect_us "${det[0]}"
	d_us=$REPLY
	fv wc_status "${det[0]}"
	d_st=$REPLY
fi
ktap_check "cmecho_detect: one event, ack_timeout 14 and retry_count 2 as qp_attrs read back" \
	eval '[ "$d_t" = 14 ] && [ "$d_t" = "$(ep_get cut qp_attrs timeout)" ] && [ "$d_r" = 2 ] && [ "$d_r" = "$(ep_get cut qp_attrs retry_cnt)" ]'
ktap_check "cmecho_detect: detect_us is the stats' detect_us, on a retry-exceeded completion (wc_status 12)" \
	eval '[[ $us =~ ^[0-9]+$ ]] && [ "$d_us" = "$us" ] && [ "$d_st" = 12 ]'
tc -n $NS_B qdisc change dev vb root netem loss 0%

# Off: a run leaves no cmecho event.
rmdir_endpoints
echo 0 >$EV/enable
echo >$TR/trace
endpoint $NS_A srv role=server mode=echo depth=1 size=64 addr=$ADDR_A port=7107 enable=1
endpoint $NS_B off role=client mode=echo addr=$ADDR_A port=7107 size=64 depth=1 count=5 enable=1
wait_done off 120
trace_read
left=0
while IFS= read -r l; do
	[[ $l == *" cmecho_"* ]] && left=$((left + 1))
done <<<"$TRACE_TEXT"
ktap_check "events off: a run of 5 echoes leaves no cmecho event" \
	eval '[ "$(<$CFS/off/state)" = done ] && [ $left = 0 ]'

echo 1 >$TR/options/record-cmd
unload_cmecho
tc -n $NS_B qdisc del dev vb root
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
