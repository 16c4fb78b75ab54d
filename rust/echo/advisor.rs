// SPDX-License-Identifier: GPL-2.0

//! The ack-timeout advisor: which ack timeout exponent `T` a path needs, from
//! the round trips a client measured on it, and how long a dead peer takes to
//! be noticed at a given `T` and retry count.
//!
//! The IBTA sizes the local ACK timeout (4.096 µs × 2^T) from advertised
//! worst cases: twice the PacketLifeTime plus the remote CA's advertised ACK
//! delay (rxe advertises 2^15 × 4.096 µs, about 134 ms; RoCE's
//! PacketLifeTime is not measured but set, 16 or T - 1). The advisor sizes it
//! from what the path measurably does instead, a heuristic: an echo round
//! trip holds the path both ways and the peer CA's real ACK delay (it
//! acknowledges on receipt, before the peer's software echoes), so
//! PacketLifeTime is taken as half a round trip, and the timer is asked to
//! cover [`MARGIN`] times the p99 round trip, and the slowest round trip seen:
//! a round trip twice as slow as the usual worst still does not time out.
//!
//! `T` = 0 means no timer at all (the QP never retransmits, and a dead peer is
//! never noticed by the transport): the advisor suggests at least 1.

/// How many times the p99 round trip the suggested timeout covers.
pub(crate) const MARGIN: u64 = 2;

/// The smallest exponent suggested: 0 would turn the timer off.
pub(crate) const MIN_T: u8 = 1;

/// The largest exponent the QP attribute holds (5 bits).
pub(crate) const MAX_T: u8 = 31;

/// The ack timeout of exponent `t`, 4.096 µs × 2^t, in ns (exact: 4096 << t).
pub(crate) fn timeout_ns(t: u8) -> u64 {
    4096u64 << t.min(MAX_T)
}

/// The smallest `T` in [`MIN_T`]..=[`MAX_T`] whose timeout covers [`MARGIN`]
/// times the p99 round trip and the slowest round trip, both in µs; [`MAX_T`]
/// when none does (round trips above about 4398 s).
pub(crate) fn suggest(p99_us: u64, max_us: u64) -> u8 {
    let need_ns = p99_us
        .saturating_mul(MARGIN)
        .max(max_us)
        .saturating_mul(1000);
    (MIN_T..=MAX_T)
        .find(|&t| timeout_ns(t) >= need_ns)
        .unwrap_or(MAX_T)
}

/// How long a dead peer takes to be noticed by a QP of ack timeout exponent
/// `t` and transport retry count `retry`, as the IBTA counts it: the first try
/// and each retry time out, (retry + 1) × 4.096 µs × 2^t, in ms rounded up.
/// `None` for `t` = 0, which has no timer. Providers may differ: rxe counts
/// its timer in whole jiffies (at least one), and retries for ever at a retry
/// count of 7.
pub(crate) fn detect_bound_ms(t: u8, retry: u8) -> Option<u64> {
    if t == 0 {
        return None;
    }
    Some(((u64::from(retry) + 1) * timeout_ns(t)).div_ceil(1_000_000))
}

#[kernel::prelude::kunit_tests(cmecho_advisor)]
mod tests {
    use super::*;

    #[test]
    fn timeout_is_4096_ns_times_two_to_the_t() {
        assert_eq!(timeout_ns(0), 4096);
        assert_eq!(timeout_ns(1), 8192);
        // The RoCE default, about 0.54 s.
        assert_eq!(timeout_ns(17), 536_870_912);
        assert_eq!(timeout_ns(31), 4096 << 31);
        assert_eq!(timeout_ns(200), 4096 << 31);
    }

    #[test]
    fn suggestion_covers_twice_p99_and_the_slowest() {
        // 2 × 500 µs = 1 ms: T = 7 gives 0.524 ms, T = 8 gives 1.049 ms.
        assert_eq!(suggest(500, 600), 8);
        // The slowest round trip, 5 ms, above 2 × p99: T = 10 gives 4.19 ms,
        // T = 11 gives 8.39 ms.
        assert_eq!(suggest(100, 5000), 11);
        // A 500 ms round trip (250 ms each way): 2 × 500 ms = 1 s needs
        // T = 18 (1.07 s); T = 17 gives 0.54 s.
        assert_eq!(suggest(500_000, 500_000), 18);
        // Just above a timer: 2 × 2048 µs = 4,096,000 ns needs T = 10
        // (4,194,304 ns), not T = 9 (2,097,152 ns).
        assert_eq!(suggest(2048, 0), 10);
        // Nothing measured yet, or a path faster than any timer: T = 1.
        assert_eq!(suggest(0, 0), MIN_T);
        assert_eq!(suggest(1, 1), MIN_T);
        // Beyond what 5 bits hold: the largest.
        assert_eq!(suggest(u64::MAX, u64::MAX), MAX_T);
        assert_eq!(suggest(10_000_000_000, 0), MAX_T);
    }

    #[test]
    fn detection_bound_is_every_try_timing_out() {
        // T = 14, retry 7: 8 × 67.1 ms = 536.9 ms, rounded up.
        assert_eq!(detect_bound_ms(14, 7), Some(537));
        // T = 12, retry 0: one timeout, 16.8 ms.
        assert_eq!(detect_bound_ms(12, 0), Some(17));
        // T = 17, retry 7: about 4.3 s.
        assert_eq!(detect_bound_ms(17, 7), Some(4295));
        // The largest: 8 × 8796 s, in ms.
        assert_eq!(detect_bound_ms(31, 7), Some(70_368_745));
        assert_eq!(detect_bound_ms(0, 7), None);
    }
}
