// SPDX-License-Identifier: GPL-2.0

//! The connection types under their former paths, for the code not yet moved
//! to the layer's root re-exports.

#[allow(
    unused_imports,
    reason = "each module that builds the layer uses a part of it"
)]
pub(crate) use super::params::{RESOLVE_RETRIES, RESOLVE_TIMEOUT_MS};
#[allow(
    unused_imports,
    reason = "each module that builds the layer uses a part of it"
)]
pub(crate) use super::{
    Conn, ConnHandler, ConnParams, ConnState, ConnectRequest, ConnectStep, EndReason, EventKind,
    ListenHandler, Listener, NetNs, RejectReason, StepError,
};
