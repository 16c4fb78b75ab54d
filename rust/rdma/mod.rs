// SPDX-License-Identifier: GPL-2.0

//! cmecho's safe layer over the RDMA connection manager and verbs: RC
//! connections in which the connection parameters are set in time.
//!
//! This module and `rust/helpers/*.c` are the only places in cmecho that hold
//! `unsafe`. One concern per file:
//!
//! | File | What |
//! |---|---|
//! | [`params`] | the value types of the connection knobs, and [`ConnParams`] that carries them |
//! | [`netns`] | [`NetNs`], a reference on the network namespace an id lives in, and addresses parsed in it |
//! | [`event`] | CM events decoded into plain values |
//! | [`id`] | ownership of CM ids and their context; the C entry point of their events |
//! | [`error`] | [`StepError`]: which setup step failed, and why |
//! | [`context`] | which task runs a callback of this layer (for `EDEADLK`) |
//! | [`conn`] | [`Conn`]: one connection; its state machine, a pure function with its table (`conn/state.rs`); the lock order (`conn/mod.rs`) |
//! | [`listener`] | [`Listener`]: the passive side |
//! | [`cq`] | work completions, from the CQ to the connection |
//! | [`verbs`] | the QP resources (PD, CQ, QP, MRs, buffers, each freed on drop, in order), the copies into and out of buffers, and posting |
//! | [`workqueue`] | the module's workqueue, for work that must not run in a callback, and [`Timer`] for a ULP's deadlines |
//! | [`debugfs`] | debugfs files whose text Rust writes, owned by the module |
//! | [`trace`] | the tracepoints: a connection's states and setup steps, an echo's round trip, a detection |
//! | `ffi` | the declarations of `rust/helpers/*.c` and of the kernel functions, enums and structs the layer uses |
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! # The ordering guarantee
//!
//! `rdma_set_ack_timeout()` only has an effect when it is called before
//! `rdma_resolve_route()` (RoCE then derives the route's PacketLifeTime from it),
//! before `rdma_connect()` on the active side, and on the *new* id of a connect
//! request before `rdma_accept()` on the passive side; the new id does not inherit
//! the listener's value. The C API checks none of this: called late, it silently
//! does nothing. The same holds for `rdma_set_min_rnr_timer()` and
//! `rdma_set_service_type()`.
//!
//! This layer makes the right order the only one a caller can write:
//!
//! - Every knob travels in one [`ConnParams`] value, handed once to
//!   [`Conn::new_active`] (active side) or [`Listener::listen`] (passive side).
//! - No type here exposes the CM id or a setter: after `connect` or `listen`
//!   returns there is no way left to change a parameter.
//! - [`Connector::connect`] applies the ack timeout, min RNR timer and type of service
//!   right after creating the id, before `rdma_resolve_addr()` and so before
//!   `rdma_resolve_route()` and `rdma_connect()`. Retry counts, depths and ECE go
//!   with the connect itself.
//! - [`Listener`] applies them to each new id inside its `CONNECT_REQUEST` event,
//!   before the QP is created and before `rdma_accept()`, which the accept's
//!   work item calls holding the id's handler mutex (`rdma_lock_handler`), as
//!   the CM requires.
//!
//! The layer also keeps the CM's other rules: ids are never destroyed from their
//! own event handler ([`Conn::close`] defers to the module's workqueue), and on
//! `DEVICE_REMOVAL` a connection releases its QP resources and hands its id back
//! to the CM for destruction, so removing a device does not wait for the ULP to
//! close its connections. It waits only for a [`Connector::connect`] under way on
//! the device (and its [`ConnHandler::before_step`] hook) to return.

mod conn;
mod context;
mod cq;
#[allow(
    dead_code,
    reason = "cmecho.ko's listings; the samples that build this layer show none"
)]
pub(crate) mod debugfs;
mod error;
mod event;
mod ffi;
mod id;
mod listener;
mod netns;
pub(crate) mod params;
pub(crate) mod trace;
pub(crate) mod verbs;
mod workqueue;

/// A duration in whole µs, rounded up (0 for a negative one): how the
/// layer's events and the echo service's counters show one.
pub(crate) fn micros(d: kernel::time::Delta) -> u64 {
    u64::try_from(d.as_micros_ceil()).unwrap_or(0)
}

// The layer's surface. Each module that builds this layer (cmecho.ko and the
// samples) uses a part of it.
#[allow(
    unused_imports,
    reason = "each module that builds the layer uses a part of it"
)]
pub(crate) use {
    conn::{Conn, ConnHandler, ConnState, ConnectStep, Connector, EndReason, Fast, FastDone, Post},
    cq::WcError,
    error::{log_ratelimit, StepError},
    event::EventKind,
    id::probe_cm,
    listener::{ConnectRequest, ListenHandler, Listener, Reject, RejectReason},
    netns::NetNs,
    params::{ConnParams, PrivateData},
    workqueue::{spawn, Timer, TimerHandler, WorkQueue},
};
