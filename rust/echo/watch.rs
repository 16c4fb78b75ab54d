// SPDX-License-Identifier: GPL-2.0

//! A client's watch over a peer that owes it an answer.
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

use crate::rdma::{Conn, ConnHandler};
use kernel::prelude::*;
use kernel::time::{Delta, Instant, Monotonic};

/// The longest wait between probes, in ms; the shortest is the endpoint
/// timer's 10 ms.
const PROBE_MAX_MS: u32 = 1000;

/// What a client connection keeps for its watch.
pub(crate) struct Watch {
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
            last_ok: None,
            probe: None,
            every: Delta::from_millis(PROBE_MAX_MS as i64),
        }
    }

    /// Sets the probe interval from `conn`'s QP: 4.096 µs × 2^T, rounded up
    /// to a ms; [`PROBE_MAX_MS`] for T = 0 (no timer) or a QP not read.
    pub(crate) fn start<H: ConnHandler>(&mut self, conn: &Conn<H>) {
        let ms = conn
            .qp_attrs()
            .ok()
            .filter(|a| a.timeout > 0 && a.timeout < 32)
            .map_or(PROBE_MAX_MS, |a| {
                let ms = (4096u64 << a.timeout).div_ceil(1_000_000);
                u32::try_from(ms).unwrap_or(PROBE_MAX_MS).min(PROBE_MAX_MS)
            });
        self.every = Delta::from_millis(i64::from(ms));
    }

    /// A SEND completed.
    pub(crate) fn acked(&mut self) {
        self.last_ok = Some(Instant::now());
    }

    /// The probe completed.
    pub(crate) fn probe_acked(&mut self) {
        self.probe = None;
        self.acked();
    }

    /// When the probe in flight was posted.
    pub(crate) fn probe_posted(&self) -> Option<Instant<Monotonic>> {
        self.probe
    }

    /// When the last SEND or probe completed.
    pub(crate) fn last_ok(&self) -> Option<Instant<Monotonic>> {
        self.last_ok
    }

    /// In how many ms the watch wants to be called again.
    pub(crate) fn again_ms(&self) -> u32 {
        u32::try_from(self.every.as_millis()).unwrap_or(PROBE_MAX_MS)
    }

    /// Posts a probe with `tag` when one is due: the connection waits for an
    /// answer with nothing of its own in flight (`idle`), no probe is in
    /// flight, and nothing completed for a probe interval.
    pub(crate) fn probe_if_due<H: ConnHandler>(
        &mut self,
        conn: &Conn<H>,
        tag: u32,
        idle: bool,
    ) -> Result {
        let quiet = self.last_ok.is_none_or(|t| t.elapsed() >= self.every);
        if idle && self.probe.is_none() && quiet {
            conn.with_res(|res| res.post_probe(tag))?;
            self.probe = Some(Instant::now());
        }
        Ok(())
    }
}
