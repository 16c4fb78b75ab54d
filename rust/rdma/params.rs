// SPDX-License-Identifier: GPL-2.0

//! Connection parameters as value types that cannot hold an invalid value.
//!
//! Each type is the IBTA encoding of one knob of an RC connection, checked on
//! construction, with its conversion to real time where it has one. They are the
//! only way to hand a value to [`ConnParams`], which carries them all into a
//! connection.
//!
//! The connection code hands the CM the encodings only. The conversions to time
//! and [`RetryCount::is_infinite`] serve the KUnit tests below, which check the
//! encodings through them, and are built only with them, under the condition
//! `#[kunit_tests]` puts on the tests (`CONFIG_KUNIT=y`): on a kernel without
//! KUnit they would be dead code, an error with `-Dwarnings`.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use core::fmt;
use kernel::prelude::*;

/// The local ACK timeout exponent `T` of an RC QP: 4.096 µs × 2^T.
///
/// `T` is a 5-bit field (0..=31). `T = 0` disables the transport timer altogether:
/// a lost packet is then never retransmitted and a dead peer is never detected.
/// cmecho accepts 0 because the IBTA defines it and some fabrics use it, but
/// [`AckTimeout::as_nanos`] reports it as `None`, not as a duration.
///
/// On RoCE, setting it before route resolution also makes the route's
/// PacketLifeTime `T - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckTimeout(u8);

impl AckTimeout {
    /// The largest encodable exponent.
    pub(crate) const MAX: u8 = 31;

    /// Checks and wraps an exponent; `EINVAL` above [`AckTimeout::MAX`].
    pub(crate) fn new(exponent: u8) -> Result<Self> {
        if exponent > Self::MAX {
            return Err(EINVAL);
        }
        Ok(Self(exponent))
    }

    /// The encoded exponent, as the CM and `ib_qp_attr.timeout` take it.
    pub(crate) fn exponent(self) -> u8 {
        self.0
    }

    /// The timeout in nanoseconds (4096 ns × 2^T); `None` for 0, the disabled timer.
    #[cfg(CONFIG_KUNIT = "y")]
    pub(crate) fn as_nanos(self) -> Option<u64> {
        if self.0 == 0 {
            None
        } else {
            Some(4096u64 << self.0)
        }
    }
}

/// The minimum RNR NAK timer, encoded as in IBTA table 45 (5 bits).
///
/// The code is not monotonic in time: 0 is the *longest* delay (655.36 ms),
/// 1..=31 go from 0.01 ms to 491.52 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MinRnrTimer(u8);

/// IBTA table 45 in microseconds, indexed by code.
#[cfg(CONFIG_KUNIT = "y")]
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl MinRnrTimer {
    /// The largest code.
    pub(crate) const MAX: u8 = 31;

    /// 0.32 ms (code 10, `IB_RNR_TIMER_000_32`), the timer RDS sets on its QPs.
    pub(crate) const MS_0_32: Self = Self(10);

    /// Checks and wraps a code; `EINVAL` above [`MinRnrTimer::MAX`].
    pub(crate) fn new(code: u8) -> Result<Self> {
        if code > Self::MAX {
            return Err(EINVAL);
        }
        Ok(Self(code))
    }

    /// The encoded value, as `rdma_set_min_rnr_timer` takes it.
    pub(crate) fn code(self) -> u8 {
        self.0
    }

    /// The delay the code stands for, in microseconds.
    #[cfg(CONFIG_KUNIT = "y")]
    pub(crate) fn as_micros(self) -> u32 {
        RNR_TIMER_US[usize::from(self.0)]
    }
}

/// A 3-bit retry count (0..=7) for transport or RNR retries.
///
/// For the RNR retry count, 7 means "retry forever" (IBTA). For the transport
/// retry count the IBTA gives 7 no special meaning, but rxe treats `retry_cnt`
/// 7 as infinite too, so a peer that vanished is never declared dead on rxe
/// with 7. Failure detection takes about (retry_count + 1) × the ack timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RetryCount(u8);

impl RetryCount {
    /// The largest count, which some providers treat as infinite.
    pub(crate) const MAX: u8 = 7;

    /// Count 7: retry forever (RNR), and on rxe for transport retries too.
    pub(crate) const INFINITE: Self = Self(Self::MAX);

    /// Checks and wraps a count; `EINVAL` above [`RetryCount::MAX`].
    pub(crate) fn new(count: u8) -> Result<Self> {
        if count > Self::MAX {
            return Err(EINVAL);
        }
        Ok(Self(count))
    }

    /// The count as `rdma_conn_param` takes it.
    pub(crate) fn get(self) -> u8 {
        self.0
    }

    /// Whether the count means "retry forever" (7) for RNR retries, and on rxe for
    /// transport retries too.
    #[cfg(CONFIG_KUNIT = "y")]
    pub(crate) fn is_infinite(self) -> bool {
        self.0 == Self::MAX
    }
}

/// Enhanced Connection Establishment options: a vendor id and a vendor-defined
/// attribute modifier, offered with a connect and answered with an accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Ece {
    /// The vendor's IEEE OUI; 0 means "no ECE".
    pub(crate) vendor_id: u32,
    /// Vendor-defined option bits.
    pub(crate) attr_mod: u32,
}

/// Private data: bytes a ULP sends with its connect request or a reject, or
/// reads from the peer's. The layer only carries them; their format is the
/// ULP's, and what a peer sent is as untrusted as any other wire input.
///
/// # Invariants
///
/// `len <= PrivateData::MAX`; `bytes[len..]` are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PrivateData {
    len: u8,
    bytes: [u8; PrivateData::MAX],
}

impl PrivateData {
    /// The most a connect request carries in the TCP port space over the IB
    /// CM: the REQ's 92 bytes less the CM's own 36-byte header. A reject
    /// carries more (148 bytes); the layer sends and reads this much of one.
    pub(crate) const MAX: usize = 56;

    /// No private data.
    pub(crate) const EMPTY: Self = Self {
        len: 0,
        bytes: [0; Self::MAX],
    };

    /// Copies `data`; `EMSGSIZE` above [`PrivateData::MAX`] bytes.
    pub(crate) fn new(data: &[u8]) -> Result<Self> {
        if data.len() > Self::MAX {
            return Err(EMSGSIZE);
        }
        let mut p = Self::EMPTY;
        p.bytes[..data.len()].copy_from_slice(data);
        // INVARIANT: At most `MAX` (checked above) bytes copied, the rest zero.
        p.len = data.len() as u8;
        Ok(p)
    }

    /// The bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The first `len` bytes of `buf` (all of them above [`PrivateData::MAX`]).
    pub(super) fn from_buf(buf: [u8; Self::MAX], len: usize) -> Self {
        let len = len.min(Self::MAX);
        let mut p = Self::EMPTY;
        p.bytes[..len].copy_from_slice(&buf[..len]);
        // INVARIANT: `len` is at most `MAX`, and the rest is zero.
        p.len = len as u8;
        p
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The parameters of an RC connection, given once, up front.
///
/// The layer applies each at its required moment (see [the ordering
/// guarantee](super#the-ordering-guarantee)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnParams {
    /// Local ACK timeout; `None` leaves the CM's default (RoCE: PacketLifeTime + 1).
    pub(crate) ack_timeout: Option<AckTimeout>,
    /// Minimum RNR NAK timer of the local QP; `None` leaves the provider default.
    pub(crate) min_rnr_timer: Option<MinRnrTimer>,
    /// Transport retry count (active side; the passive side takes the peer's).
    pub(crate) retry_count: RetryCount,
    /// RNR retry count.
    pub(crate) rnr_retry_count: RetryCount,
    /// ECE offered with the connect, or answered with the accept.
    pub(crate) ece: Option<Ece>,
    /// Outstanding RDMA READs this side may issue.
    pub(crate) initiator_depth: u8,
    /// Outstanding RDMA READs this side accepts from the peer.
    pub(crate) responder_resources: u8,
    /// Type of service (RoCE traffic class); `None` leaves the default.
    pub(crate) tos: Option<u8>,
    /// How long one attempt at address or route resolution may take, in ms
    /// (active side).
    pub(crate) resolve_timeout_ms: u32,
    /// Attempts at address or route resolution repeated after one timed out
    /// (active side): a neighbour still being resolved is not a failure.
    pub(crate) resolve_retries: u8,
    /// How long `rdma_connect` may take until `ESTABLISHED`, in ms (active side).
    pub(crate) connect_timeout_ms: u32,
    /// Busy polling, in µs: how long the connection's completion work goes on
    /// polling its CQ after the last completion before it sleeps until the
    /// next; 0 leaves the CQ to the core, as `poll_context` says: its
    /// workqueue (`IB_POLL_WORKQUEUE` or `IB_POLL_UNBOUND_WORKQUEUE`), which
    /// sleeps at once, or its softirq (`IB_POLL_SOFTIRQ`). The handlers run in the same context either way; polling costs
    /// CPU time, and saves the wake-up of a work item for a completion that
    /// comes within it.
    pub(crate) busy_poll_us: u32,
    /// Which CPU runs the connection's completion work, busy-polled or not.
    pub(crate) poll_context: PollContext,
}

/// Where a connection's completion work runs: a work item in process context
/// (the handlers may sleep), woken on the CPU its CQ's event came on, or on
/// any; or the CQ's softirq, which hands the handler's fast path
/// ([`ConnHandler::fast_completion`]) each successful completion and passes
/// the rest, in order, to a work item in process context.
///
/// [`ConnHandler::fast_completion`]: super::ConnHandler::fast_completion
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PollContext {
    /// Per CPU, on the CPU of the CQ's event (`IB_POLL_WORKQUEUE`, the core's
    /// `ib-comp-wq`): the work item waits for that CPU to be free, where the
    /// provider's own task that made the completion may still run.
    #[default]
    Workqueue,
    /// Unbound (`IB_POLL_UNBOUND_WORKQUEUE`, `ib-comp-unb-wq`): the scheduler
    /// wakes the work item on any CPU it allows, an idle one first.
    UnboundWorkqueue,
    /// The CQ's softirq (`IB_POLL_SOFTIRQ`), on the CPU of the CQ's event,
    /// with no task to wake. Busy polled, the unbound polling workqueue's
    /// work item polls, and its completions go the same way.
    Softirq,
}

impl PollContext {
    /// The value's name, as the `enum ib_poll_context` value it stands for
    /// names it, lower case without its `IB_POLL_` prefix.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Workqueue => "workqueue",
            Self::UnboundWorkqueue => "unbound_workqueue",
            Self::Softirq => "softirq",
        }
    }

    /// The value [`PollContext::name`] gives `name`.
    pub(crate) fn by_name(name: &str) -> Option<Self> {
        [Self::Workqueue, Self::UnboundWorkqueue, Self::Softirq]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

impl Default for ConnParams {
    /// What the CM and the provider choose when nothing is set, but for the
    /// retry and RNR retry counts, 7 (the RNR retries then never run out), and
    /// one outstanding RDMA READ each way; resolution and connect time out after
    /// [`RESOLVE_TIMEOUT_MS`] (repeated [`RESOLVE_RETRIES`] times) and
    /// [`CONNECT_TIMEOUT_MS`].
    fn default() -> Self {
        Self {
            ack_timeout: None,
            min_rnr_timer: None,
            retry_count: RetryCount::INFINITE,
            rnr_retry_count: RetryCount::INFINITE,
            ece: None,
            initiator_depth: 1,
            responder_resources: 1,
            tos: None,
            resolve_timeout_ms: RESOLVE_TIMEOUT_MS,
            resolve_retries: RESOLVE_RETRIES,
            connect_timeout_ms: CONNECT_TIMEOUT_MS,
            busy_poll_us: 0,
            poll_context: PollContext::Workqueue,
        }
    }
}

/// How long one attempt at address or route resolution may take, by default.
pub(crate) const RESOLVE_TIMEOUT_MS: u32 = 2000;
/// Resolution attempts repeated after a timeout, by default.
pub(crate) const RESOLVE_RETRIES: u8 = 3;
/// How long connection establishment may take, by default.
pub(crate) const CONNECT_TIMEOUT_MS: u32 = 30_000;

impl fmt::Display for AckTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for MinRnrTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for RetryCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[kunit_tests(cmecho_params)]
mod tests {
    use super::*;

    #[test]
    fn conn_params_default() {
        let p = ConnParams::default();
        assert!(p.ack_timeout.is_none() && p.min_rnr_timer.is_none() && p.tos.is_none());
        assert!(p.ece.is_none());
        assert!(p.retry_count.is_infinite() && p.rnr_retry_count.is_infinite());
        assert_eq!((p.initiator_depth, p.responder_resources), (1, 1));
        assert_eq!(p.resolve_timeout_ms, RESOLVE_TIMEOUT_MS);
        assert_eq!(p.resolve_retries, RESOLVE_RETRIES);
        assert_eq!(p.connect_timeout_ms, CONNECT_TIMEOUT_MS);
    }

    #[test]
    fn private_data_bounds() {
        assert_eq!(PrivateData::EMPTY.as_bytes(), &[] as &[u8]);
        let p = PrivateData::new(&[1, 2, 3]).unwrap();
        assert_eq!(p.as_bytes(), &[1, 2, 3]);
        assert!(PrivateData::new(&[7; PrivateData::MAX]).is_ok());
        assert_eq!(PrivateData::new(&[7; PrivateData::MAX + 1]), Err(EMSGSIZE));
        let mut buf = [0u8; PrivateData::MAX];
        buf[0] = 9;
        buf[5] = 4;
        assert_eq!(PrivateData::from_buf(buf, 1).as_bytes(), &[9]);
        assert_eq!(
            PrivateData::from_buf(buf, 1),
            PrivateData::new(&[9]).unwrap()
        );
        assert_eq!(
            PrivateData::from_buf(buf, 1000).as_bytes().len(),
            PrivateData::MAX
        );
    }

    #[test]
    fn ack_timeout_range() {
        assert!(AckTimeout::new(0).is_ok());
        assert!(AckTimeout::new(31).is_ok());
        assert_eq!(AckTimeout::new(32), Err(EINVAL));
        assert_eq!(AckTimeout::new(255), Err(EINVAL));
    }

    #[test]
    fn ack_timeout_time() {
        assert_eq!(AckTimeout::new(0).map(AckTimeout::as_nanos), Ok(None));
        // 4.096 µs × 2^14 = 67.108864 ms.
        assert_eq!(
            AckTimeout::new(14).map(AckTimeout::as_nanos),
            Ok(Some(67_108_864))
        );
        // The RoCE default, 17: about 0.54 s.
        assert_eq!(
            AckTimeout::new(17).map(AckTimeout::as_nanos),
            Ok(Some(536_870_912))
        );
        assert_eq!(
            AckTimeout::new(31).map(AckTimeout::as_nanos),
            Ok(Some(8_796_093_022_208))
        );
    }

    #[test]
    fn min_rnr_timer_table() {
        assert_eq!(MinRnrTimer::new(0).map(MinRnrTimer::as_micros), Ok(655_360));
        assert_eq!(MinRnrTimer::new(1).map(MinRnrTimer::as_micros), Ok(10));
        assert_eq!(MinRnrTimer::new(12).map(MinRnrTimer::as_micros), Ok(640));
        assert_eq!(
            MinRnrTimer::new(31).map(MinRnrTimer::as_micros),
            Ok(491_520)
        );
        assert_eq!(MinRnrTimer::new(32), Err(EINVAL));
        assert_eq!(MinRnrTimer::MS_0_32.as_micros(), 320);
    }

    #[test]
    fn retry_count_range() {
        assert_eq!(RetryCount::new(0).map(RetryCount::get), Ok(0));
        assert_eq!(RetryCount::new(7).map(RetryCount::is_infinite), Ok(true));
        assert_eq!(RetryCount::new(6).map(RetryCount::is_infinite), Ok(false));
        assert_eq!(RetryCount::new(8), Err(EINVAL));
    }
}
