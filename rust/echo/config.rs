// SPDX-License-Identifier: GPL-2.0

//! An endpoint's configuration: what configfs stores. The limits configfs
//! checks are in [`super::limits`].

use super::rping;
use crate::rdma::params::{AckTimeout, Ece, MinRnrTimer, PollContext, RetryCount};
use crate::rdma::params::{CONNECT_TIMEOUT_MS, RESOLVE_RETRIES, RESOLVE_TIMEOUT_MS};
use crate::rdma::ConnParams;
use kernel::prelude::*;

/// The longest address an endpoint accepts (an IPv6 address with a scope).
pub(crate) const MAX_ADDR_LEN: usize = 64;
/// Where an endpoint's completion work runs, by default: in the CQ's softirq.
/// A native echo connection's echoes then need no work item on either side,
/// the fastest and cheapest mode of `make bench` (sections 1 and 1d;
/// Documentation/cmecho-performance.rst); what the fast path leaves goes to
/// cmecho's workqueue.
pub(crate) const DEFAULT_POLL_CONTEXT: PollContext = PollContext::Softirq;
/// The most connections a server keeps at once, by default. Each holds a QP,
/// a CQ, a PD, an MR and its buffers beyond what `mem_budget_kib` counts; 256
/// is 64 clients of a full `clients` four times over.
pub(crate) const DEFAULT_MAX_CONNS: u32 = 256;
/// The default buffer memory budget of an endpoint, in KiB (64 MiB): room for
/// `DEFAULT_MAX_CONNS` rping server connections (64 KiB and two messages
/// each) four times over, or two echo connections at their largest (depth
/// 256 of 64 KiB, twice).
pub(crate) const DEFAULT_MEM_BUDGET_KIB: u32 = 64 * 1024;
/// How long a server waits for an accepted connection to be established, by
/// default: as long as a client waits for its connect (`CONNECT_TIMEOUT_MS`).
/// An honest client answers the accept within a round trip; the CM itself
/// would wait as long as the client's connect request asks (about 65 s for
/// librdmacm's, up to days for a crafted one).
pub(crate) const ACCEPT_TIMEOUT_MS: u32 = CONNECT_TIMEOUT_MS;
/// How long a native echo client waits for the echo of a message the peer's
/// device acknowledged, in ms, by default: as long as the other deadlines a
/// peer is given.
pub(crate) const ECHO_TIMEOUT_MS: u32 = CONNECT_TIMEOUT_MS;

/// Which side an endpoint plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Listens and echoes.
    Server,
    /// Connects and pings.
    Client,
}

/// An address as text, NUL-terminated, without allocation.
#[derive(Clone, Copy)]
pub(crate) struct Addr {
    buf: [u8; MAX_ADDR_LEN + 1],
}

impl Addr {
    /// Copies `s`; `None` if it is empty, too long or holds a NUL.
    pub(crate) fn new(s: &str) -> Option<Self> {
        if s.is_empty() || s.len() > MAX_ADDR_LEN || s.bytes().any(|b| b == 0) {
            return None;
        }
        let mut buf = [0u8; MAX_ADDR_LEN + 1];
        buf[..s.len()].copy_from_slice(s.as_bytes());
        Some(Self { buf })
    }

    /// The address as a C string.
    pub(crate) fn as_cstr(&self) -> &CStr {
        let len = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_ADDR_LEN);
        CStr::from_bytes_with_nul(&self.buf[..=len]).unwrap_or(c"")
    }

    /// The address as text.
    pub(crate) fn as_str(&self) -> &str {
        self.as_cstr().to_str().unwrap_or("?")
    }
}

/// Which protocol an endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// rping's: RDMA READ/WRITE of advertised buffers, one ping at a time.
    Rping,
    /// Native SEND/RECV echo with `depth` messages in flight.
    Echo,
}

/// An endpoint's configuration, as configfs stores it.
#[derive(Clone, Copy)]
pub(crate) struct Config {
    /// Server or client.
    pub(crate) role: Role,
    /// rping or native echo.
    pub(crate) mode: Mode,
    /// Messages in flight per connection (echo mode; servers: the most accepted).
    pub(crate) depth: u32,
    /// Run for this long instead of `count` messages (echo-mode clients).
    pub(crate) duration_ms: Option<u32>,
    /// The address to listen on or connect to (`None`: unset).
    pub(crate) addr: Option<Addr>,
    /// The port.
    pub(crate) port: u16,
    /// The ack timeout (`None`: unset, the CM default applies).
    pub(crate) ack_timeout: Option<AckTimeout>,
    /// The minimum RNR NAK timer of this side's QPs (`None`: unset, see
    /// [`Config::conn_params`]).
    pub(crate) min_rnr_timer: Option<MinRnrTimer>,
    /// Transport retry count offered with the connect (`None`: 7, as rping).
    pub(crate) retry_count: Option<RetryCount>,
    /// RNR retry count sent to the peer (`None`: 7, as rping).
    pub(crate) rnr_retry_count: Option<RetryCount>,
    /// Type of service for RoCE (`None`: default).
    pub(crate) tos: Option<u8>,
    /// ECE vendor id (24 bits) offered or answered (`None`: no ECE).
    pub(crate) ece_vendor_id: Option<u32>,
    /// ECE attribute modifier (`None`: 0).
    pub(crate) ece_attr_mod: Option<u32>,
    /// Whether a server rejects connect requests whose ECE vendor id differs.
    pub(crate) ece_strict: bool,
    /// Outstanding RDMA READs this side issues (`None`: 1, as rping).
    pub(crate) initiator_depth: Option<u8>,
    /// Outstanding RDMA READs this side accepts (`None`: 1, as rping).
    pub(crate) responder_resources: Option<u8>,
    /// Most connections a server keeps at once.
    pub(crate) max_conns: u32,
    /// Pings per client connection.
    pub(crate) count: u64,
    /// Bytes per ping.
    pub(crate) size: u32,
    /// Client connections opened at once.
    pub(crate) clients: u32,
    /// The most buffer memory the endpoint's connections hold at once, in KiB.
    pub(crate) mem_budget_kib: u32,
    /// How long a client's address or route resolution attempt may take, in ms.
    pub(crate) resolve_timeout_ms: u32,
    /// Resolution attempts a client repeats after one timed out.
    pub(crate) resolve_retries: u8,
    /// How long a client's connection may take from `rdma_connect` to
    /// established, in ms.
    pub(crate) connect_timeout_ms: u32,
    /// How long a server waits for an accepted connection to be established
    /// (the client's RTU), in ms.
    pub(crate) accept_timeout_ms: u32,
    /// How long a native echo client waits for the echo of a message its
    /// peer's device acknowledged, in ms.
    pub(crate) echo_timeout_ms: u32,
    /// How long each connection's completion work busy-polls its CQ after a
    /// completion, in µs (0: not at all).
    pub(crate) busy_poll_us: u32,
    /// Which CPU runs each connection's completion work.
    pub(crate) poll_context: PollContext,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            role: Role::Client,
            mode: Mode::Rping,
            depth: 1,
            duration_ms: None,
            addr: None,
            port: rping::DEFAULT_PORT,
            ack_timeout: None,
            min_rnr_timer: None,
            retry_count: None,
            rnr_retry_count: None,
            tos: None,
            ece_vendor_id: None,
            ece_attr_mod: None,
            ece_strict: false,
            initiator_depth: None,
            responder_resources: None,
            max_conns: DEFAULT_MAX_CONNS,
            count: 10,
            size: 64,
            clients: 1,
            mem_budget_kib: DEFAULT_MEM_BUDGET_KIB,
            resolve_timeout_ms: RESOLVE_TIMEOUT_MS,
            resolve_retries: RESOLVE_RETRIES,
            connect_timeout_ms: CONNECT_TIMEOUT_MS,
            accept_timeout_ms: ACCEPT_TIMEOUT_MS,
            echo_timeout_ms: ECHO_TIMEOUT_MS,
            busy_poll_us: 0,
            poll_context: DEFAULT_POLL_CONTEXT,
        }
    }
}

impl Config {
    /// The parameters of this endpoint's connections. A server's QPs whose
    /// `min_rnr_timer` is unset get [`MinRnrTimer::MS_0_32`], not the
    /// CM's code 0 (655.36 ms): a server reposts a receive only
    /// once the buffer is free again (its echo acknowledged, in echo mode),
    /// and a client's SEND that comes first would wait out the whole timer,
    /// on a live connection or, after a cut, before its retries start. A
    /// client's QPs keep the CM's.
    pub(super) fn conn_params(&self) -> ConnParams {
        let d = ConnParams::default();
        let min_rnr_timer = match self.role {
            Role::Server => self.min_rnr_timer.or(Some(MinRnrTimer::MS_0_32)),
            Role::Client => self.min_rnr_timer,
        };
        ConnParams {
            ack_timeout: self.ack_timeout,
            min_rnr_timer,
            retry_count: self.retry_count.unwrap_or(d.retry_count),
            rnr_retry_count: self.rnr_retry_count.unwrap_or(d.rnr_retry_count),
            tos: self.tos,
            ece: self.ece(),
            initiator_depth: self.initiator_depth.unwrap_or(d.initiator_depth),
            responder_resources: self.responder_resources.unwrap_or(d.responder_resources),
            resolve_timeout_ms: self.resolve_timeout_ms,
            resolve_retries: self.resolve_retries,
            connect_timeout_ms: self.connect_timeout_ms,
            busy_poll_us: self.busy_poll_us,
            poll_context: self.poll_context,
        }
    }

    /// The ECE this endpoint offers (client) or answers with (server).
    pub(super) fn ece(&self) -> Option<Ece> {
        self.ece_vendor_id.map(|vendor_id| Ece {
            vendor_id,
            attr_mod: self.ece_attr_mod.unwrap_or(0),
        })
    }
}
