// SPDX-License-Identifier: GPL-2.0

//! The echo service: endpoints that serve or run pings over `rdma` connections.
//!
//! An endpoint is one configfs directory. As a server it listens and answers any
//! number of clients, each on its own QP; as a client it opens `clients`
//! connections and runs `count` pings of `size` bytes on each. Both speak the rping
//! protocol ([`rping`]), so either side may be the stock `rping` of rdma-core.
//!
//! This module is safe Rust: everything unsafe is in `crate::rdma`. One concern
//! per file:
//!
//! | File | What |
//! |---|---|
//! | [`config`] | the configuration configfs stores |
//! | [`limits`] | every knob's limit, one `const` each, and the refusal written from it |
//! | [`stats`] | the stats, the RTT histogram and samples, what a QP got, per-connection counters |
//! | [`admission`] | whether an endpoint's connections are admitted: memory budget, `max_conns`, ECE policy |
//! | [`endpoint`] | the endpoint's lifecycle, its locks and the service's lock order; what it keeps of, does for and reports about its connections |
//! | [`mode`] | the modes as a table: what the service needs of each, the listener they share |
//! | [`rping`] | the rping mode: its wire format; `client.rs`, `server.rs` its two sides |
//! | [`native`] | the native SEND/RECV echo mode: its message pattern; `client.rs`, `server.rs` its two sides |
//! | [`hello`] | the native echo's size and depth, agreed at connect time |
//! | [`watch`] | a client's watch over a peer that owes it an answer: probes, and the answer's deadline |
//!
//! The text of the attributes configfs shows is in `crate::configfs`.

mod admission;
pub(crate) mod advisor;
mod config;
mod endpoint;
mod error_text;
mod hello;
pub(crate) mod limits;
mod mode;
pub(crate) mod native;
pub(crate) mod rping;
mod stats;
mod watch;

pub(crate) use config::{Addr, Config, Mode, Role};
pub(crate) use endpoint::{ConnView, Endpoint, Shared, State};
pub(crate) use stats::{percentile, StatsReading};

// What the modes' modules (`rping`, `native`) use as `crate::echo::`.
use endpoint::{spawn_connect, EchoConn, ErrName};
use stats::ConnCounters;
