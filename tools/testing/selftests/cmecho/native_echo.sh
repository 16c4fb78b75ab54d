#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Native echo mode: sizes 1, 64, 4096 and 65536 bytes at depth 1 and 32, every
# echo verified (sequence number and content); a duration-bounded run; and the
# stats formats (histogram, percentiles, throughput).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 12
dmesg_mark
load_cmecho
net_setup || ktap_print_msg "network setup failed"

endpoint $NS_A srv role=server mode=echo depth=32 size=65536 addr=$ADDR_A enable=1
for size in 1 64 4096 65536; do
	for depth in 1 32; do
		ep=e${size}_$depth
		endpoint $NS_B $ep role=client mode=echo addr=$ADDR_A size=$size depth=$depth count=200 enable=1
		wait_done $ep 180
		ktap_print_msg "$ep: $(cat $CFS/$ep/state); $(grep -E '^(pings|bytes|verify_errors|rtt_p50_us|rtt_p99_us|throughput_mbit_s) ' $CFS/$ep/stats | tr '\n' ' ')"
		ktap_check "echo size $size depth $depth: 200 messages, all verified" \
			test "$(cat $CFS/$ep/state)" = done -a "$(ep_get $ep stats pings)" = 200 \
			-a "$(ep_get $ep stats verify_errors)" = 0 -a "$(ep_get $ep stats errors)" = 0 \
			-a "$(ep_get $ep stats bytes)" = $((200 * size))
		rmdir $CFS/$ep
	done
done

endpoint $NS_B dur role=client mode=echo addr=$ADDR_A size=64 depth=8 duration_ms=1500 enable=1
wait_done dur 60
ktap_print_msg "dur: $(cat $CFS/dur/state); pings $(ep_get dur stats pings)"
ktap_check "duration_ms 1500: ends by itself, messages verified" \
	test "$(cat $CFS/dur/state)" = done -a "$(ep_get dur stats pings)" -gt 0 \
	-a "$(ep_get dur stats verify_errors)" = 0
ktap_check "stats: p50 <= p99 <= max, histogram counts every RTT" sh -c "
	p50=\$(sed -n 's/^rtt_p50_us //p' $CFS/dur/stats); p99=\$(sed -n 's/^rtt_p99_us //p' $CFS/dur/stats)
	max=\$(sed -n 's/^rtt_max_us //p' $CFS/dur/stats); n=\$(sed -n 's/^pings //p' $CFS/dur/stats)
	h=\$(sed -n 's/^rtt_hist_lt_[0-9]*us //p' $CFS/dur/stats | paste -sd+ | bc)
	[ \$p50 -le \$p99 ] && [ \$p99 -le \$max ] && [ \$h -eq \$n ]"

ktap_check "server stats count what the clients sent" test "$(ep_get srv stats verify_errors)" = 0 -a "$(ep_get srv stats errors)" = 0
unload_cmecho
net_cleanup
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
