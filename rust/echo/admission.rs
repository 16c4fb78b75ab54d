// SPDX-License-Identifier: GPL-2.0

//! Admission: whether an endpoint's connections fit its limits.
//!
//! `enable` checks that the connections an endpoint opens at once fit
//! `mem_budget_kib` ([`enable_fits`]); a server then decides on each connect
//! request ([`admit`]): the memory budget, `max_conns` and the ECE policy, in
//! that order. Both decide on the configuration and a count only: the caller
//! holds `Shared::inner`, counts a rejection and records its message.
//!
//! `clients` itself is bounded by [`super::limits::CLIENTS`] when configfs
//! stores it.

use super::config::{Config, Role};
use crate::rdma::params::Ece;
use crate::rdma::RejectReason;
use kernel::fmt;
use kernel::prelude::*;

/// The memory an endpoint's connections take, as admission counts it.
impl Config {
    /// The buffer memory one connection of this endpoint holds, in bytes.
    fn conn_buf_bytes(&self) -> u64 {
        (self.mode.ops().conn_buf_bytes)(self)
    }

    /// The budget in bytes.
    fn mem_budget(&self) -> u64 {
        u64::from(self.mem_budget_kib) * 1024
    }
}

/// `enable`'s connections exceed `mem_budget_kib`; the text completes the
/// message of `last_error`.
pub(super) struct OverBudget {
    /// The connections `enable` opens at once.
    conns: u64,
    /// The buffer memory of each, in KiB.
    conn_kib: u64,
    /// `mem_budget_kib`.
    budget_kib: u32,
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connection(s) with {} KiB of buffers each exceed mem_budget_kib {}",
            self.conns, self.conn_kib, self.budget_kib
        )
    }
}

/// Checks that the connections `enable` opens at once fit the memory budget: a
/// client's `clients`, or the first a server accepts.
pub(super) fn enable_fits(cfg: &Config) -> Result<(), OverBudget> {
    let conns = if cfg.role == Role::Client {
        u64::from(cfg.clients)
    } else {
        1
    };
    if conns * cfg.conn_buf_bytes() > cfg.mem_budget() {
        return Err(OverBudget {
            conns,
            conn_kib: cfg.conn_buf_bytes().div_ceil(1024),
            budget_kib: cfg.mem_budget_kib,
        });
    }
    Ok(())
}

/// Why a server rejects a connect request; the text completes the message of
/// `last_error`.
pub(super) enum Refusal {
    /// One more connection would exceed `mem_budget_kib`.
    MemBudget {
        /// `mem_budget_kib`.
        budget_kib: u32,
        /// The connections the server keeps.
        live: usize,
        /// The buffer memory of each, in KiB.
        conn_kib: u64,
    },
    /// The server keeps `max_conns` connections.
    MaxConns(u32),
    /// `ece_policy` is strict and the request offers another ECE vendor id.
    Ece {
        /// The vendor id the request offers.
        offered: u32,
        /// The server's (0: none).
        required: u32,
    },
}

impl Refusal {
    /// The reason the reject gives the peer.
    pub(super) fn reason(&self) -> RejectReason {
        match self {
            Self::MemBudget { .. } | Self::MaxConns(_) => RejectReason::Consumer,
            Self::Ece { .. } => RejectReason::VendorOptionNotSupported,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MemBudget {
                budget_kib,
                live,
                conn_kib,
            } => write!(
                f,
                "mem_budget_kib {} reached ({} connections of {} KiB)",
                budget_kib, live, conn_kib
            ),
            Self::MaxConns(max) => write!(f, "max_conns {} reached", max),
            Self::Ece { offered, required } => write!(
                f,
                "ECE vendor id {:#x} offered, {:#x} required",
                offered, required
            ),
        }
    }
}

/// Decides on a connect request to a server that keeps `live` connections, whose
/// peer offers ECE vendor id `offered`. Returns the ECE to answer with.
pub(super) fn admit(cfg: &Config, live: usize, offered: u32) -> Result<Option<Ece>, Refusal> {
    let need = cfg.conn_buf_bytes();
    if (live as u64 + 1) * need > cfg.mem_budget() {
        return Err(Refusal::MemBudget {
            budget_kib: cfg.mem_budget_kib,
            live,
            conn_kib: need.div_ceil(1024),
        });
    }
    if live >= cfg.max_conns as usize {
        return Err(Refusal::MaxConns(cfg.max_conns));
    }
    let mine = cfg.ece();
    match mine {
        Some(e) if e.vendor_id == offered => Ok(Some(e)),
        _ if cfg.ece_strict => Err(Refusal::Ece {
            offered,
            required: mine.map(|e| e.vendor_id).unwrap_or(0),
        }),
        _ => Ok(None),
    }
}
