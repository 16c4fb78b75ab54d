// SPDX-License-Identifier: GPL-2.0

//! Every limit of an endpoint's knobs, each one `const`, and the refusal that
//! says it: configfs checks a value against its [`Limit`], and the message in
//! `last_error` is written from the same `const`, so the two cannot differ.

use super::config::Mode;
use crate::rdma::params::{AckTimeout, MinRnrTimer, RetryCount};
use kernel::fmt;

/// The values a numeric knob accepts, and how a refusal names them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    /// The smallest value.
    pub(crate) lo: u64,
    /// The largest value.
    pub(crate) hi: u64,
    /// What a value is, written before the range ("a port number"), or "".
    what: &'static str,
    /// The unit, written after the range ("bytes"), or "".
    unit: &'static str,
    /// A remark, written in parentheses after it, or "".
    note: &'static str,
    /// The largest value is written in hexadecimal.
    hex: bool,
    /// The message names only `what`, not the range (a whole type's range).
    no_range: bool,
}

impl Limit {
    const fn new(lo: u64, hi: u64) -> Self {
        Self {
            lo,
            hi,
            what: "",
            unit: "",
            note: "",
            hex: false,
            no_range: false,
        }
    }

    const fn what(mut self, what: &'static str) -> Self {
        self.what = what;
        self
    }

    const fn unit(mut self, unit: &'static str) -> Self {
        self.unit = unit;
        self
    }

    const fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }

    const fn hex(mut self) -> Self {
        self.hex = true;
        self
    }

    const fn no_range(mut self) -> Self {
        self.no_range = true;
        self
    }

    /// Whether `v` is accepted.
    pub(crate) fn holds(&self, v: u64) -> bool {
        (self.lo..=self.hi).contains(&v)
    }
}

/// The port a server listens on, or a client connects to.
pub(crate) const PORT: Limit = Limit::new(1, u16::MAX as u64).what("a port number");
/// The ack timeout exponent T (4.096 µs × 2^T).
pub(crate) const ACK_TIMEOUT: Limit =
    Limit::new(0, AckTimeout::MAX as u64).note("4.096 us * 2^T; 0 disables the timer");
/// Pings per client connection.
pub(crate) const COUNT: Limit = Limit::new(1, 10_000_000);
/// Bytes of a ping or message.
pub(crate) const SIZE: Limit = Limit::new(1, 65536).unit("bytes");
/// Client connections of one endpoint.
pub(crate) const CLIENTS: Limit = Limit::new(1, 64);
/// The IBTA minimum RNR NAK timer code.
pub(crate) const MIN_RNR_TIMER: Limit = Limit::new(0, MinRnrTimer::MAX as u64)
    .what("an IBTA RNR timer code")
    .note("0 = 655.36 ms");
/// The transport retry count.
pub(crate) const RETRY_COUNT: Limit =
    Limit::new(0, RetryCount::MAX as u64).note("7 is infinite on rxe");
/// The RNR retry count.
pub(crate) const RNR_RETRY_COUNT: Limit =
    Limit::new(0, RetryCount::MAX as u64).note("7 is infinite");
/// The type of service.
pub(crate) const TOS: Limit = Limit::new(0, u8::MAX as u64);
/// An ECE vendor id (IEEE OUI, 24 bits).
pub(crate) const ECE_VENDOR_ID: Limit = Limit::new(1, 0xff_ffff).what("a 24-bit vendor id").hex();
/// An ECE attribute modifier.
pub(crate) const ECE_ATTR_MOD: Limit = Limit::new(0, u32::MAX as u64)
    .what("a 32-bit value")
    .no_range();
/// Outstanding RDMA READs each way (rxe's limit).
pub(crate) const RD_ATOMIC: Limit = Limit::new(1, 128);
/// Connections a server keeps at once.
pub(crate) const MAX_CONNS: Limit = Limit::new(1, 1024);
/// Messages in flight per native echo connection.
pub(crate) const DEPTH: Limit = Limit::new(1, 256);
/// How long a client runs, in ms (an hour at most).
pub(crate) const DURATION_MS: Limit = Limit::new(1, 3_600_000);
/// An endpoint's buffer memory budget: 64 KiB to 16 GiB.
pub(crate) const MEM_BUDGET_KIB: Limit = Limit::new(64, 16 * 1024 * 1024).unit("KiB");
/// The CM's address and route resolution timeout, in ms.
pub(crate) const RESOLVE_TIMEOUT_MS: Limit = Limit::new(100, 60_000);
/// Resolution attempts repeated after a timeout.
pub(crate) const RESOLVE_RETRIES: Limit = Limit::new(0, 10);
/// From `rdma_connect` to established, in ms.
pub(crate) const CONNECT_TIMEOUT_MS: Limit = Limit::new(100, 600_000);
/// From a server's accept to established, in ms.
pub(crate) const ACCEPT_TIMEOUT_MS: Limit = Limit::new(100, 600_000);
/// From a message's acknowledgement to its echo, in ms.
pub(crate) const ECHO_TIMEOUT_MS: Limit = Limit::new(100, 600_000);
/// How long a connection's completion work busy-polls its CQ after a
/// completion, in µs: up to 10 ms, far more than a round trip.
pub(crate) const BUSY_POLL_US: Limit = Limit::new(0, 10_000);

/// Why a store was refused: the text `last_error` gives after the
/// attribute's name.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// A message of its own.
    Text(&'static str),
    /// A number outside its limit, or not a number; `unset` if the knob may
    /// also be unset.
    Range(&'static Limit, bool),
    /// Not the name of a mode: the message names them all, from the modes'
    /// table.
    Mode,
}

impl From<&'static str> for Refusal {
    fn from(text: &'static str) -> Self {
        Self::Text(text)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, unset) = match self {
            Self::Text(t) => return f.write_str(t),
            Self::Range(l, unset) => (l, *unset),
            Self::Mode => {
                f.write_str("must be ")?;
                for (i, m) in Mode::ALL.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" or ")?;
                    }
                    f.write_str(m.ops().name)?;
                }
                return Ok(());
            }
        };
        f.write_str("must be ")?;
        if unset {
            f.write_str("unset or ")?;
        }
        if !l.what.is_empty() {
            f.write_str(l.what)?;
            if !l.no_range {
                f.write_str(" ")?;
            }
        }
        if !l.no_range {
            if l.hex {
                write!(f, "{}..{:#x}", l.lo, l.hi)?;
            } else {
                write!(f, "{}..{}", l.lo, l.hi)?;
            }
        }
        if !l.unit.is_empty() {
            write!(f, " {}", l.unit)?;
        }
        if !l.note.is_empty() {
            write!(f, " ({})", l.note)?;
        }
        Ok(())
    }
}

#[kernel::prelude::kunit_tests(cmecho_limits)]
mod tests {
    use super::*;
    use crate::echo::error_text::ErrorText;

    /// The message of a refusal, as `last_error` would give it.
    fn says(r: Refusal, want: &str) -> bool {
        let mut t = ErrorText::new();
        t.set(kernel::prelude::fmt!("{}", r));
        t.get() == Some(want)
    }

    #[test]
    fn messages_from_the_limits() {
        assert!(says(
            Refusal::Range(&PORT, false),
            "must be a port number 1..65535"
        ));
        assert!(says(
            Refusal::Range(&ACK_TIMEOUT, true),
            "must be unset or 0..31 (4.096 us * 2^T; 0 disables the timer)"
        ));
        assert!(says(Refusal::Range(&SIZE, false), "must be 1..65536 bytes"));
        assert!(says(
            Refusal::Range(&ECE_VENDOR_ID, true),
            "must be unset or a 24-bit vendor id 1..0xffffff"
        ));
        assert!(says(
            Refusal::Range(&ECE_ATTR_MOD, true),
            "must be unset or a 32-bit value"
        ));
        assert!(says(
            Refusal::Range(&MEM_BUDGET_KIB, false),
            "must be 64..16777216 KiB"
        ));
        assert!(says(Refusal::Text("must be 0 or 1"), "must be 0 or 1"));
        assert!(says(Refusal::Mode, "must be rping or echo"));
    }

    #[test]
    fn bounds_are_inclusive() {
        assert!(DEPTH.holds(1) && DEPTH.holds(256) && !DEPTH.holds(0) && !DEPTH.holds(257));
        assert!(RESOLVE_RETRIES.holds(0) && !RESOLVE_RETRIES.holds(11));
    }
}
