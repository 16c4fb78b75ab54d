// SPDX-License-Identifier: GPL-2.0

//! A connection's watch over its peer: a client's over a peer that owes it
//! an answer, a server's over an idle client.
//!
//! The ack timeout covers only what a side has in flight. A client whose
//! SENDs are all acknowledged, and which waits for the peer's answer, has
//! nothing in flight: no retry timer runs, and a peer that dies then is never
//! noticed. So while it waits like that, the client posts a probe, a
//! zero-length RDMA WRITE the peer's device answers without its software,
//! once per ack timeout of its QP: the probe's retries detect a dead peer as
//! a SEND's would. And a peer whose device answers but whose software does
//! not gets `echo_timeout_ms` from the acknowledgement of the message it
//! owes an answer to. The endpoint's timer calls each connection's
//! [`EchoConn::tick`](super::EchoConn::tick), where a mode does both.
//!
//! A server keeps the same watch over an established connection, with a
//! longer interval ([`SERVER_IDLE_MS`]): a connection with no completion for
//! that long gets a probe, so that a client whose host died does not hold its
//! connection, QP and buffers for as long as the server runs. A server does
//! not count on the probe's retries running out: the client chose its QP's
//! retry count in its connect request, and rxe retries for ever at 7, the
//! count rping asks for. A probe still unacknowledged a server interval later
//! ends the connection ([`Stall::Unacked`]).

use super::ErrName;
use crate::rdma::verbs::QpAttrs;
use crate::rdma::{Conn, ConnHandler};
use kernel::fmt;
use kernel::prelude::*;
use kernel::time::{Delta, Instant, Monotonic};

/// The longest wait between probes, in ms; the shortest is the endpoint
/// timer's 10 ms.
const PROBE_MAX_MS: u32 = 1000;

/// How long a server's established connection may see no completion before
/// it gets a probe, in ms.
pub(crate) const SERVER_IDLE_MS: u32 = 10_000;

/// Why a watch ends its connection.
pub(crate) enum Stall {
    /// A server's probe, still unacknowledged a server interval after its post.
    Unacked,
    /// The probe could not be posted.
    Post(Error),
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unacked => write!(f, "probe not acknowledged within {} ms", SERVER_IDLE_MS),
            Self::Post(e) => {
                f.write_str("cannot post a probe: ")?;
                fmt::Display::fmt(&ErrName(*e), f)
            }
        }
    }
}

/// What a connection keeps for its watch.
pub(crate) struct Watch {
    /// Started: the connection is up, and its QP may be probed.
    on: bool,
    /// A server's: a probe overdue ends the connection.
    server: bool,
    /// When the last SEND or probe completed: an acknowledgement, which
    /// restarts the transport's retry timer (an arriving message does not).
    last_ok: Option<Instant<Monotonic>>,
    /// When the probe in flight was posted; `None` while none is.
    probe: Option<Instant<Monotonic>>,
    /// How long the connection waits, nothing of its own in flight, before
    /// it posts a probe: its QP's ack timeout, at most [`PROBE_MAX_MS`].
    every: Delta,
}

impl Watch {
    pub(crate) const fn new() -> Self {
        Self {
            on: false,
            server: false,
            last_ok: None,
            probe: None,
            every: Delta::from_millis(PROBE_MAX_MS as i64),
        }
    }

    /// Starts a client's watch, with the probe interval of its QP (`qp`, as
    /// read when the connection was established): 4.096 µs × 2^T, rounded up
    /// to a ms; [`PROBE_MAX_MS`] for T = 0 (no timer) or a QP not read.
    pub(crate) fn start(&mut self, qp: Option<QpAttrs>) {
        let ms = qp
            .filter(|a| a.timeout > 0 && a.timeout < 32)
            .map_or(PROBE_MAX_MS, |a| {
                let ms = (4096u64 << a.timeout).div_ceil(1_000_000);
                u32::try_from(ms).unwrap_or(PROBE_MAX_MS).min(PROBE_MAX_MS)
            });
        self.every = Delta::from_millis(i64::from(ms));
        self.on = true;
    }

    /// Starts a server's watch, as its connection is established: a probe
    /// after [`SERVER_IDLE_MS`] without a completion, and a probe overdue
    /// after as long again ends the connection.
    pub(crate) fn start_server(&mut self) {
        self.every = Delta::from_millis(i64::from(SERVER_IDLE_MS));
        self.server = true;
        self.on = true;
        self.acked();
    }

    /// A SEND completed (a client), or any request (a server).
    pub(crate) fn acked(&mut self) {
        self.last_ok = Some(Instant::now());
    }

    /// Something was acknowledged at `t` (a completion recorded where the
    /// watch's lock cannot be taken, the CQ's softirq): the latest of the
    /// acknowledgements counts.
    pub(crate) fn acked_at(&mut self, t: Instant<Monotonic>) {
        if self.last_ok.is_none_or(|l| (t - l).as_nanos() > 0) {
            self.last_ok = Some(t);
        }
    }

    /// The probe completed.
    pub(crate) fn probe_acked(&mut self) {
        self.probe = None;
        self.acked();
    }

    /// Whether the probe in flight was posted a whole interval ago: for a
    /// server, whose interval is far longer than any retry of a live path.
    fn probe_overdue(&self) -> bool {
        self.probe.is_some_and(|t| t.elapsed() >= self.every)
    }

    /// When the probe in flight was posted.
    pub(crate) fn probe_posted(&self) -> Option<Instant<Monotonic>> {
        self.probe
    }

    /// When the last SEND or probe completed.
    pub(crate) fn last_ok(&self) -> Option<Instant<Monotonic>> {
        self.last_ok
    }

    /// In how many ms the watch wants to be called again: its interval, at
    /// most [`PROBE_MAX_MS`].
    pub(crate) fn again_ms(&self) -> u32 {
        u32::try_from(self.every.as_millis())
            .unwrap_or(PROBE_MAX_MS)
            .min(PROBE_MAX_MS)
    }

    /// The watch's turn, once started: a server's probe overdue is a
    /// [`Stall::Unacked`]; otherwise it posts a probe with `tag` when one is
    /// due: the connection has nothing of its own in flight (`idle`), no probe
    /// is in flight, and nothing completed for a probe interval.
    pub(crate) fn check<H: ConnHandler>(
        &mut self,
        conn: &Conn<H>,
        tag: u32,
        idle: bool,
    ) -> Result<(), Stall> {
        if !self.on {
            return Ok(());
        }
        if self.server && self.probe_overdue() {
            return Err(Stall::Unacked);
        }
        let quiet = self.last_ok.is_none_or(|t| t.elapsed() >= self.every);
        if idle && self.probe.is_none() && quiet {
            conn.with_res(|res| res.post_probe(tag))
                .map_err(Stall::Post)?;
            self.probe = Some(Instant::now());
        }
        Ok(())
    }
}

/// What a connection's tick returns once its watch has checked it
/// ([`Watch::check`]): in `again` ms the next tick, or, the check having
/// failed, `None`, after `fail` got the reason to end the connection with.
pub(crate) fn verdict(
    checked: Result<(), Stall>,
    again: u32,
    fail: impl FnOnce(fmt::Arguments<'_>),
) -> Option<u32> {
    match checked {
        Ok(()) => Some(again),
        Err(why) => {
            fail(fmt!("{}", why));
            None
        }
    }
}
