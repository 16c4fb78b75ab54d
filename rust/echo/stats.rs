// SPDX-License-Identifier: GPL-2.0

//! An endpoint's counters: the stats, the RTT histogram and samples behind
//! them, what a connection's QP got, and the counters of one connection.

use crate::rdma::verbs::QpAttrs;
use crate::rdma::Conn;
use kernel::alloc::AllocError;
use kernel::prelude::*;
use kernel::time::Delta;

/// Counters of one endpoint since it was last enabled.
#[derive(Clone, Copy, Default)]
pub(crate) struct Stats {
    /// Pings completed (and, on clients, verified).
    pub(crate) pings: u64,
    /// Errors of any kind: failed connects, failed work requests, protocol errors,
    /// verification failures.
    pub(crate) errors: u64,
    /// Connections established.
    pub(crate) connections: u64,
    /// Connect requests rejected (servers: by `max_conns`, `mem_budget_kib` or
    /// `ece_policy`; clients: by the peer).
    pub(crate) rejected: u64,
    /// Payload bytes echoed.
    pub(crate) bytes: u64,
    /// Echoes that differed from what was sent.
    pub(crate) verify_errors: u64,
    /// Client connections whose setup failed.
    pub(crate) connect_failed: u64,
    /// Server connections closed because they were not established within
    /// `accept_timeout_ms` of their accept.
    pub(crate) accept_timeouts: u64,
    /// Errors not logged because of the rate limit (all are counted in
    /// `errors`, and the last is `last_error`).
    pub(crate) logs_suppressed: u64,
    /// Of `pings`, the echoes a fast path completed in the CQ's softirq: on
    /// a server, those whose echo's SEND completed there; on a client, those
    /// whose echo was verified there.
    pub(crate) softirq_pings: u64,
    /// Failed work completions by `ib_wc_status` (the first few statuses seen).
    pub(crate) wc_errors: [(u32, u64); 8],
    /// The round trips' summary, copied from [`Rtt`] when the stats are read.
    pub(crate) rtt_n: u64,
    pub(crate) rtt_sum_us: u64,
    pub(crate) rtt_min_us: u64,
    pub(crate) rtt_max_us: u64,
    /// RTT histogram: bucket `i` counts RTTs below 2^(i+1) µs and at least 2^i
    /// (bucket 0 also counts 0 and 1 µs).
    pub(crate) rtt_hist: [u64; 32],
    /// How long the last client run took, from establishment to the last echo.
    pub(crate) run_us: u64,
    /// Connections that ended on a failed work completion (native echo clients).
    pub(crate) detect_n: u64,
    /// The detection time of the last of them, in µs.
    pub(crate) detect_last_us: u64,
}

impl Stats {
    /// Records how a connection's failure was detected (see
    /// [`ConnCounters::detect_us`]).
    pub(crate) fn record_detection(&mut self, us: u64) {
        self.detect_n += 1;
        self.detect_last_us = us;
    }

    /// Counts a failed work completion by status.
    pub(crate) fn wc_error(&mut self, status: u32) {
        if let Some(e) = self.wc_errors.iter_mut().find(|e| e.1 > 0 && e.0 == status) {
            e.1 += 1;
        } else if let Some(e) = self.wc_errors.iter_mut().find(|e| e.1 == 0) {
            *e = (status, 1);
        }
    }

    /// Records how long a client connection ran; the run is as long as its longest.
    pub(crate) fn run_time(&mut self, d: Delta) {
        self.run_us = self.run_us.max(crate::rdma::micros(d));
    }
}

/// A reading of an endpoint's stats, as `stats` shows it.
pub(crate) struct StatsReading {
    /// The counters.
    pub(crate) stats: Stats,
    /// Connections established when they were read.
    pub(crate) active: usize,
    /// A copy of the RTT samples, for percentiles computed without the lock
    /// (`Err`: no memory for the copy).
    pub(crate) samples: Result<KVVec<u32>, AllocError>,
}

/// The round-trip times of a run, exact: each one in µs rounded up, the first
/// [`RTT_SAMPLES`] as they came and, after that, a uniform random sample of all of
/// them (reservoir sampling), so that percentiles are those of the samples kept,
/// never the bounds of a histogram bucket.
pub(crate) struct RttSamples {
    /// Microseconds, rounded up as `stats` shows them (saturated at `u32::MAX`,
    /// about 71 minutes).
    kept: KVVec<u32>,
    /// How many were offered since the last reset.
    seen: u64,
    /// State of the xorshift generator that picks the reservoir's victims.
    rng: u64,
}

/// The round-trip times of a run: the stats' summary of them (`rtt_*`) and
/// the samples behind their percentiles. Under a lock of its own, a
/// `SpinLockIrq` (`Shared::rtt`), so that a completion recording one may run
/// in the CQ's softirq.
pub(crate) struct Rtt {
    pub(super) samples: RttSamples,
    n: u64,
    sum_us: u64,
    min_us: u64,
    max_us: u64,
    hist: [u64; 32],
}

impl Rtt {
    pub(super) const fn new() -> Self {
        Self {
            samples: RttSamples::new(),
            n: 0,
            sum_us: 0,
            min_us: 0,
            max_us: 0,
            hist: [0; 32],
        }
    }

    /// Forgets every round trip, keeping the samples' memory.
    pub(super) fn reset(&mut self) {
        self.samples.reset();
        self.n = 0;
        self.sum_us = 0;
        self.min_us = 0;
        self.max_us = 0;
        self.hist = [0; 32];
    }

    /// Records a round trip of `ns` nanoseconds. Never allocates.
    pub(super) fn record(&mut self, ns: u64) {
        let us = ns.div_ceil(1000);
        if self.n == 0 || us < self.min_us {
            self.min_us = us;
        }
        if us > self.max_us {
            self.max_us = us;
        }
        self.n += 1;
        self.sum_us += us;
        let bucket = (63 - us.max(1).leading_zeros()).min(31) as usize;
        self.hist[bucket] += 1;
        self.samples.record(ns);
    }

    /// Copies the summary into `s`' `rtt_*` fields.
    pub(super) fn summary_into(&self, s: &mut Stats) {
        s.rtt_n = self.n;
        s.rtt_sum_us = self.sum_us;
        s.rtt_min_us = self.min_us;
        s.rtt_max_us = self.max_us;
        s.rtt_hist = self.hist;
    }
}

/// How many round-trip times [`RttSamples`] keeps: 256 KiB per client endpoint.
pub(crate) const RTT_SAMPLES: usize = 65536;

impl RttSamples {
    pub(super) const fn new() -> Self {
        Self {
            kept: KVVec::new(),
            seen: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Forgets the samples, keeping the memory.
    pub(super) fn reset(&mut self) {
        self.kept.clear();
        self.seen = 0;
    }

    /// Makes room for [`RTT_SAMPLES`]; called before a client starts, with no lock
    /// held, so that recording never allocates.
    pub(super) fn reserve(&mut self) -> Result {
        let have = self.kept.capacity();
        if have < RTT_SAMPLES {
            self.kept
                .reserve(RTT_SAMPLES - self.kept.len(), GFP_KERNEL)?;
        }
        Ok(())
    }

    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    pub(super) fn record(&mut self, ns: u64) {
        let v = u32::try_from(ns.div_ceil(1000)).unwrap_or(u32::MAX);
        self.seen += 1;
        if self.kept.len() < RTT_SAMPLES {
            // Never allocates: the room was reserved (and when it could not be,
            // the sample is dropped rather than allocating here).
            let _ = self.kept.push_within_capacity(v);
            return;
        }
        let j = self.next_rand() % self.seen;
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.kept.get_mut(j)) {
            *slot = v;
        }
    }

    /// How many samples are kept.
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Appends to `v` the kept samples from `v.len()` on, at most `max` and
    /// no more than its capacity holds; whether some are left. For
    /// percentiles computed without the lock, a part at a time, so that the
    /// copy does not keep interrupts off for long. Never allocates: the
    /// caller made the room before taking the lock that completions take.
    pub(super) fn copy_more(&self, v: &mut KVVec<u32>, max: usize) -> bool {
        let end = self.kept.len().min(v.capacity());
        let to = end.min(v.len().saturating_add(max));
        if let Some(part) = self.kept.get(v.len()..to) {
            // Within capacity: `GFP_NOWAIT` is never used to allocate.
            let _ = v.extend_from_slice(part, GFP_NOWAIT);
        }
        to < end
    }
}

/// The `pct` percentile (nearest rank) of `v`; reorders `v`.
pub(crate) fn percentile(v: &mut [u32], pct: usize) -> Option<u32> {
    if v.is_empty() {
        return None;
    }
    let rank = (v.len() * pct).div_ceil(100).max(1);
    let (_, x, _) = v.select_nth_unstable(rank - 1);
    Some(*x)
}

/// What the QP of a connection really got, captured when it was established.
#[derive(Clone, Copy, Default)]
pub(crate) struct ReadBack {
    /// The QP's attributes.
    pub(crate) qp: QpAttrs,
    /// The route's PacketLifeTime, where the route has one.
    pub(crate) plt: Option<u8>,
    /// The route's traffic class, where the route has one.
    pub(crate) tclass: Option<u8>,
    /// The ECE the peer sent.
    pub(crate) remote_ece: crate::rdma::params::Ece,
}

impl ReadBack {
    /// Reads back what the QP and route of `conn` got.
    pub(super) fn of<H: crate::rdma::ConnHandler>(conn: &Conn<H>) -> Option<Self> {
        Some(Self {
            qp: conn.qp_attrs().ok()?,
            plt: conn.route_plt(),
            tclass: conn.route_tclass(),
            remote_ece: conn.remote_ece(),
        })
    }
}

/// Per-connection counters, as `connections` shows them.
#[derive(Clone, Copy, Default)]
pub(crate) struct ConnCounters {
    /// Messages (pings) completed.
    pub(crate) messages: u64,
    /// Payload bytes echoed.
    pub(crate) bytes: u64,
    /// Errors on this connection.
    pub(crate) errors: u64,
    /// How long the failure that ended the connection took to be detected, in µs:
    /// from the post of the oldest SEND not yet completed, or from the last SEND
    /// completion if that came later (an acknowledgement restarts the transport's
    /// retry timer), to the failed completion. Native echo clients only.
    pub(crate) detect_us: Option<u64>,
}

#[kunit_tests(cmecho_stats)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v = KVec::<u32>::new();
        for x in (1..=100u32).rev() {
            v.push(x * 1000, GFP_KERNEL).unwrap();
        }
        assert_eq!(percentile(&mut v, 50), Some(50_000));
        assert_eq!(percentile(&mut v, 99), Some(99_000));
        assert_eq!(percentile(&mut v, 100), Some(100_000));
        let mut one = [7u32];
        assert_eq!(percentile(&mut one, 50), Some(7));
        assert_eq!(percentile(&mut one, 99), Some(7));
        assert_eq!(percentile(&mut [], 50), None);
    }

    #[test]
    fn samples_keep_a_bounded_uniform_reservoir() {
        let mut r = RttSamples::new();
        // Without reserved room nothing is kept, and nothing allocates.
        r.record(5);
        assert_eq!(r.kept.len(), 0);
        r.reset();
        r.reserve().unwrap();
        let cap = r.kept.capacity();
        for i in 0..(RTT_SAMPLES as u64 * 2) {
            r.record(i * 1000);
        }
        assert_eq!(r.kept.len(), RTT_SAMPLES);
        assert_eq!(r.kept.capacity(), cap);
        assert_eq!(r.seen, RTT_SAMPLES as u64 * 2);
        // About half of the kept samples come from the second half.
        let late = r
            .kept
            .iter()
            .filter(|&&x| x as usize >= RTT_SAMPLES)
            .count();
        assert!(late > RTT_SAMPLES * 4 / 10 && late < RTT_SAMPLES * 6 / 10);
        // Kept in µs rounded up, saturated at u32::MAX µs.
        r.reset();
        r.record(1001);
        r.record(u64::MAX);
        assert_eq!(r.kept[0], 2);
        assert_eq!(r.kept[1], u32::MAX);
        r.reset();
        assert_eq!(r.kept.len(), 0);
        assert_eq!(r.kept.capacity(), cap);
    }

    #[test]
    fn a_copy_takes_what_its_room_holds() {
        let mut r = RttSamples::new();
        r.reserve().unwrap();
        for i in 1..=10u64 {
            r.record(i * 1000);
        }
        // Room for fewer than are kept: the first ones, and no growth.
        let mut v = KVVec::with_capacity(4, GFP_KERNEL).unwrap();
        let cap = v.capacity();
        while r.copy_more(&mut v, 64) {}
        assert_eq!(v.len(), cap.min(10));
        assert!(v.iter().enumerate().all(|(i, &x)| x as usize == i + 1));
        assert_eq!(v.capacity(), cap);
        // Room for all, 3 at a time: all of them, in order.
        let mut v = KVVec::with_capacity(r.len(), GFP_KERNEL).unwrap();
        assert!(r.copy_more(&mut v, 3));
        assert_eq!(v.len(), 3);
        let mut parts = 1;
        while r.copy_more(&mut v, 3) {
            parts += 1;
        }
        assert_eq!(parts, 3);
        assert_eq!(v.len(), 10);
        assert!(v.iter().enumerate().all(|(i, &x)| x as usize == i + 1));
        // Fewer kept than copied already (a reset meanwhile): nothing more.
        r.reset();
        assert!(!r.copy_more(&mut v, 3));
        assert_eq!(v.len(), 10);
        // No room at all: an empty copy.
        let mut v = KVVec::new();
        assert!(!r.copy_more(&mut v, 3));
        assert_eq!(v.len(), 0);
    }
}
