#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Every attribute rejects bad values with EINVAL, a readable last_error and no
# change; writes while enabled fail with EBUSY and change nothing either.
. "$(dirname "$0")/lib.sh"

HUGE=$(head -c 3000 /dev/zero | tr '\0' 7)
declare -A BAD=(
	[role]="|serverx|1|$HUGE"
	[addr]="|abc|1.2.3.4.5|999.1.1.1|::g|10.77.0.1:80|1.2.3.4 5|fe80::1%nosuchdev|$HUGE"
	[port]="|abc|0|-1|65536|99999999999999999999|7174x|$HUGE"
	[ack_timeout]="|abc|32|-1|1.5|255|unsetx|$HUGE"
	[count]="|abc|0|-1|10000001|99999999999999999999|$HUGE"
	[size]="|abc|0|-1|65537|$HUGE"
	[clients]="|abc|0|-1|65|$HUGE"
	[enable]="abc|2|-1|10|yes|on|true|0x1|01|+1|$HUGE"
	[min_rnr_timer]="|abc|32|-1|$HUGE"
	[retry_count]="|abc|8|-1|$HUGE"
	[rnr_retry_count]="|abc|8|-1|$HUGE"
	[tos]="|abc|256|-1|$HUGE"
	[ece_vendor_id]="|abc|0|0x1000000|-1|0xg|$HUGE"
	[ece_attr_mod]="|abc|0x100000000|-1|$HUGE"
	[ece_policy]="|strictx|1|$HUGE"
	[initiator_depth]="|abc|0|129|-1|$HUGE"
	[responder_resources]="|abc|0|129|-1|$HUGE"
	[max_conns]="|abc|0|1025|-1|unset|$HUGE"
	[mode]="|echox|RPING|$HUGE"
	[depth]="|abc|0|257|-1|$HUGE"
	[duration_ms]="|abc|0|3600001|-1|$HUGE"
	[mem_budget_kib]="|abc|0|63|16777217|-1|$HUGE"
	[resolve_timeout_ms]="|abc|0|99|60001|-1|$HUGE"
	[resolve_retries]="|abc|-1|11|256|$HUGE"
	[connect_timeout_ms]="|abc|0|99|600001|-1|$HUGE"
	[accept_timeout_ms]="|abc|0|99|600001|-1|$HUGE"
	[echo_timeout_ms]="|abc|0|99|600001|-1|unset|$HUGE"
	[busy_poll_us]="|abc|10001|-1|unset|1.5|$HUGE"
	[poll_context]="|WORKQUEUE|SOFTIRQ|soft_irq|direct|workqueuex|unbound|unset|$HUGE"
)
ATTRS="role addr port ack_timeout count size clients enable min_rnr_timer retry_count
rnr_retry_count tos ece_vendor_id ece_attr_mod ece_policy initiator_depth
responder_resources max_conns mode depth duration_ms mem_budget_kib resolve_timeout_ms
resolve_retries connect_timeout_ms accept_timeout_ms echo_timeout_ms busy_poll_us
poll_context"

ktap_print_header
ktap_set_plan 49
dmesg_mark
load_cmecho
mkdir $CFS/ep

# A new endpoint reads the defaults of the ABI document; the limits of a server
# (max_conns, mem_budget_kib, accept_timeout_ms) are finite.
DEFAULTS="role=client addr=unset port=7174 ack_timeout=unset count=10 size=64 clients=1
enable=0 min_rnr_timer=unset retry_count=unset rnr_retry_count=unset tos=unset
ece_vendor_id=unset ece_attr_mod=unset ece_policy=relaxed initiator_depth=unset
responder_resources=unset max_conns=256 mode=rping depth=1 duration_ms=unset
mem_budget_kib=65536 resolve_timeout_ms=2000 resolve_retries=3 connect_timeout_ms=30000
accept_timeout_ms=30000 echo_timeout_ms=30000 busy_poll_us=0 poll_context=softirq"
ok=1
for kv in $DEFAULTS; do
	got=$(<$CFS/ep/${kv%%=*})
	[ "$got" = "${kv#*=}" ] || { ktap_print_msg "${kv%%=*}: default '$got', documented '${kv#*=}'"; ok=0; }
done
ktap_check "a new endpoint reads the documented defaults" test $ok = 1

# Every step below avoids forking: on the debug kernel under TCG a process
# creation costs about a second, and the loops below make hundreds of writes.
# fread FILE VAR: the whole file into VAR.
fread() {
	IFS= read -r -d '' "$2" <"$1"
	return 0
}

# wr FILE VALUE: writes VALUE; ERR is the write's error message, empty on success.
wr() {
	ERR=
	{ echo "$2" >"$1"; } 2>/tmp/cfs_err || IFS= read -r ERR </tmp/cfs_err
	return 0
}

# write ATTR VALUE: wr on endpoint ep.
write() {
	wr "$CFS/ep/$1" "$2"
}

# busy_writes EP: true when, on enabled endpoint EP, a write of a new value to
# every attribute (and of 1 to enable) fails with EBUSY and changes nothing.
busy_writes() {
	local ep=$1 a v before err ok=0
	for a in role addr port ack_timeout count size clients min_rnr_timer retry_count \
		rnr_retry_count tos ece_vendor_id ece_attr_mod ece_policy initiator_depth \
		responder_resources max_conns mode depth duration_ms mem_budget_kib \
		resolve_timeout_ms resolve_retries connect_timeout_ms accept_timeout_ms echo_timeout_ms \
		busy_poll_us poll_context enable; do
		fread $CFS/$ep/$a before
		case $a in
		role) v=server; [ "$before" = "server"$'\n' ] && v=client ;;
		addr) v=$ADDR_B ;; ack_timeout) v=14 ;; ece_policy) v=strict ;; mode) v=echo ;;
		poll_context) v=workqueue; [ "$before" = "workqueue"$'\n' ] && v=unbound_workqueue ;;
		mem_budget_kib) v=128 ;; resolve_timeout_ms) v=500 ;; connect_timeout_ms | accept_timeout_ms | echo_timeout_ms) v=5000 ;;
		enable) v=1 ;; *) v=2 ;;
		esac
		wr $CFS/$ep/$a "$v"
		fread $CFS/$ep/$a after
		if [[ $ERR != *busy* ]] || [ "$after" != "$before" ]; then
			ktap_print_msg "$ep: $a while enabled: '${ERR:-success}', value now $after"
			ok=1
		fi
	done
	return $ok
}

for a in $ATTRS; do
	fread $CFS/ep/$a before
	ok=1
	IFS='|' read -r -a vals <<<"${BAD[$a]}"
	for v in "${vals[@]}"; do
		write $a "$v"
		fread $CFS/ep/$a after
		fread $CFS/ep/last_error le
		if [[ $ERR != *"Invalid argument"* ]]; then
			ktap_print_msg "$a='${v:0:20}': expected EINVAL, got '${ERR:-success}'"
			ok=0
		elif [ "$after" != "$before" ]; then
			ktap_print_msg "$a='${v:0:20}': value changed from '$before' to '$after'"
			ok=0
		elif [[ $le != "$a: "* ]]; then
			ktap_print_msg "$a='${v:0:20}': last_error does not name the attribute: $le"
			ok=0
		fi
	done
	# Not ktap_print_msg: it echoes its words unquoted, and a message with a
	# '*' (ack_timeout's "4.096 us * 2^T") would list this directory.
	printf '# %s\n' "$a: last_error after bad values: $(<$CFS/ep/last_error)"
	ktap_check "$a: ${#vals[@]} bad values rejected with EINVAL, value unchanged" test $ok = 1
done

ktap_check "state unchanged (idle) after every bad write" test "$(<$CFS/ep/state)" = idle

# Good values read back exactly as written; "unset" goes back to unset.
rt=1
for kv in ack_timeout=14 min_rnr_timer=12 retry_count=5 rnr_retry_count=3 tos=32 \
	ece_vendor_id=0x1234 ece_attr_mod=0x5 ece_policy=strict initiator_depth=4 \
	responder_resources=4 max_conns=8 max_conns=1 max_conns=1024 port=7000 count=7 size=100 clients=3 role=server \
	addr=10.1.2.3 addr=fe80::1%lo ack_timeout=unset tos=unset mode=echo \
	depth=256 duration_ms=1500 duration_ms=unset mode=rping mem_budget_kib=64 \
	mem_budget_kib=16777216 resolve_timeout_ms=100 resolve_timeout_ms=60000 \
	resolve_retries=0 resolve_retries=10 connect_timeout_ms=100 connect_timeout_ms=600000 \
	accept_timeout_ms=100 accept_timeout_ms=600000 echo_timeout_ms=100 echo_timeout_ms=600000 \
	busy_poll_us=10000 busy_poll_us=0 busy_poll_us=200 poll_context=workqueue \
	poll_context=unbound_workqueue poll_context=softirq poll_context=workqueue; do
	a=${kv%%=*}
	v=${kv#*=}
	write $a "$v" >/dev/null
	got=$(<$CFS/ep/$a)
	[ "$got" = "$v" ] || { ktap_print_msg "$a: wrote '$v', read '$got'"; rt=0; }
done
ktap_check "good values read back exactly as written (unset where unset)" test $rt = 1

# Every form a write can take. Without a trailing newline, and with a leading
# "+" (as kstrtoul reads numbers), a value is taken; an embedded NUL, bytes that
# are not UTF-8 and more than a page are refused, changing nothing.
ok=1
{ printf 7001 >$CFS/ep/port; } 2>/dev/null && fread $CFS/ep/port v && [ "$v" = $'7001\n' ] ||
	{ ktap_print_msg "port without a newline: read back $v"; ok=0; }
{ printf '+7002\n' >$CFS/ep/port; } 2>/dev/null && fread $CFS/ep/port v && [ "$v" = $'7002\n' ] ||
	{ ktap_print_msg "port '+7002': read back $v"; ok=0; }
ktap_check "write forms: no trailing newline and a leading + are taken" test $ok = 1
ok=1
for form in nul utf8 page; do
	case $form in
	nul) { printf '70\x0003' >$CFS/ep/port; } 2>/tmp/cfs_err ;;
	utf8) { printf 'serv\xffer' >$CFS/ep/role; } 2>/tmp/cfs_err ;;
	page) { head -c 5000 /dev/zero | tr '\0' 7 >$CFS/ep/port; } 2>/tmp/cfs_err ;;
	esac
	IFS= read -r ERR </tmp/cfs_err
	if [[ $ERR != *"Invalid argument"* ]] || [ "$(<$CFS/ep/port)" != 7002 ] ||
		[ "$(<$CFS/ep/role)" != server ]; then
		ktap_print_msg "$form: '${ERR:-success}', port $(<$CFS/ep/port), role $(<$CFS/ep/role)"
		ok=0
	fi
done
ktap_print_msg "after the refused forms, last_error: $(<$CFS/ep/last_error)"
ktap_check "write forms: an embedded NUL, non-UTF-8 and more than a page are refused (EINVAL), nothing changed" \
	test $ok = 1
# An unprivileged user can neither write an attribute nor make an endpoint.
setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "echo 7003 >$CFS/ep/port" 2>/tmp/cfs_err
rc=$?
setpriv --reuid=65534 --regid=65534 --clear-groups mkdir $CFS/nobody 2>>/tmp/cfs_err
rc2=$?
ktap_print_msg "unprivileged: $(tr '\n' ' ' </tmp/cfs_err)"
ktap_check "write forms: an unprivileged user is refused, nothing changed" \
	test $rc != 0 -a $rc2 != 0 -a "$(<$CFS/ep/port)" = 7002 -a ! -e $CFS/nobody
rmdir $CFS/ep
mkdir $CFS/ep

write enable 1; err=$ERR
ktap_check "enable with addr unset: EINVAL, last_error says so" \
	sh -c "echo '$err' | grep -q 'Invalid argument' && grep -q 'addr is not set' $CFS/ep/last_error"

net_setup || ktap_print_msg "network setup failed"
echo server >$CFS/ep/role
echo 10.77.0.99 >$CFS/ep/addr
write enable 1; err=$ERR
ktap_print_msg "enable on an address no device has: ${err:-success}; last_error: $(<$CFS/ep/last_error)"
ktap_check "enable on an address no device has: fails with a reason, stays disabled" \
	test -n "$err" -a "$(<$CFS/ep/enable)" = 0

rmdir $CFS/ep
in_ns $NS_A mkdir $CFS/ep
# A scope names an interface of the endpoint's own namespace (va is in a only).
write addr "fe80::1%va"
ktap_check "addr: a scoped IPv6 address of the endpoint's namespace is accepted" \
	test -z "$ERR" -a "$(<$CFS/ep/addr)" = "fe80::1%va"
echo server >$CFS/ep/role
echo $ADDR_A >$CFS/ep/addr
# With addr set, anything but 0 or 1 would start the endpoint if it were taken
# for a boolean.
ok=1
for v in 10 yes on true y 0x1 01; do
	write enable $v
	if [[ $ERR != *"Invalid argument"* ]] || [ "$(<$CFS/ep/state)" != idle ]; then
		ktap_print_msg "enable='$v': '${ERR:-success}', state $(<$CFS/ep/state)"
		ok=0
		echo 0 >$CFS/ep/enable
	fi
done
ktap_check "enable: only 0 or 1; 10, yes, on, true, y, 0x1, 01 refused, still idle" \
	test $ok = 1 -a "$(grep -c 'must be 0 or 1' $CFS/ep/last_error)" = 1
echo 1 >$CFS/ep/enable
ktap_check "listening server: writes while enabled fail with EBUSY and change nothing" busy_writes ep
ktap_check "still listening after the refused writes" test "$(<$CFS/ep/state)" = listening

# A connecting client: everything namespace a sends is lost (netem), so the
# client's connect request goes unanswered and it stays connecting until its
# connect times out: silence_on (lib.sh). Port 7199 has no listener. The
# longest connect_timeout_ms leaves the end to the CM's own retries of the
# request, about 74 s with ack_timeout unset (the ABI document): longer than
# the writes below take.
silence_on
endpoint $NS_B conn role=client addr=$ADDR_A port=7199 count=10000000 \
	connect_timeout_ms=600000 enable=1
st=$(<$CFS/conn/state)
busy_writes conn
rc=$?
ktap_print_msg "connecting client: state $st before the writes, $(<$CFS/conn/state) after; last_error: $(<$CFS/conn/last_error)"
ktap_check "connecting client: writes fail with EBUSY and change nothing" test $rc = 0
ktap_check "connecting client: connecting before and after the refused writes" \
	test "$st" = connecting -a "$(<$CFS/conn/state)" = connecting
rmdir $CFS/conn

# connect_timeout_ms ends the wait for an unanswered connect: with 1000 ms the
# client fails with rdma_connect ETIMEDOUT well before the default 30 s would
# end it (the bound below is generous for the 1 s, and short of the 30 s).
endpoint $NS_B cto role=client addr=$ADDR_A port=7199 connect_timeout_ms=1000 enable=1
state_is cto error 200
le=$(<$CFS/cto/last_error)
ktap_print_msg "connect_timeout_ms=1000: state $(<$CFS/cto/state); last_error: $le; connect_failed $(ep_get cto stats connect_failed)"
ktap_check "connect_timeout_ms=1000: an unanswered connect fails within 20 s with rdma_connect ETIMEDOUT" \
	test "$(<$CFS/cto/state)" = error -a "${le#*rdma_connect: ETIMEDOUT}" != "$le"
rmdir $CFS/cto
silence_off

# A running client: pinging the server, with a count it cannot finish.
endpoint $NS_B run role=client addr=$ADDR_A count=10000000 enable=1
state_is run running 3000
st=$(<$CFS/run/state)
busy_writes run
rc=$?
ktap_print_msg "running client: state $st before the writes, $(<$CFS/run/state) after; pings $(ep_get run stats pings); last_error: $(<$CFS/run/last_error)"
ktap_check "running client: writes fail with EBUSY and change nothing" test $rc = 0
ktap_check "running client: running before and after the refused writes" \
	test "$st" = running -a "$(<$CFS/run/state)" = running

# Address resolution that times out is attempted again, resolve_retries times:
# nobody answers ARP for 10.77.0.99, so each attempt ends with ADDR_ERROR
# -ETIMEDOUT after resolve_timeout_ms.
for retries in 2 0; do
	endpoint $NS_B res$retries role=client addr=10.77.0.99 resolve_timeout_ms=300 \
		resolve_retries=$retries enable=1
	state_is res$retries error 300
	le=$(<$CFS/res$retries/last_error)
	ktap_print_msg "resolve_retries=$retries: state $(<$CFS/res$retries/state); last_error: $le"
	case $retries in
	2) ktap_check "resolve_retries=2: three attempts, then ADDR_ERROR ETIMEDOUT" \
		test "${le#*ADDR_ERROR (status -110) after 3 attempts}" != "$le" ;;
	0) ktap_check "resolve_retries=0: one attempt, then ADDR_ERROR ETIMEDOUT" \
		test "${le#*ADDR_ERROR (status -110)}" = "" ;;
	esac
	rmdir $CFS/res$retries
done

unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
