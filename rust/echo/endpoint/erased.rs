// SPDX-License-Identifier: GPL-2.0

//! What an endpoint keeps of its connections and listener whatever their
//! mode: the traits that erase the handler types.

use crate::echo::hello::Refused;
use crate::echo::stats::ConnCounters;
use crate::rdma::params::PrivateData;
use crate::rdma::verbs::QpAttrs;
use crate::rdma::{Conn, ConnHandler, ConnState, Listener};
use kernel::prelude::*;
use kernel::sync::Arc;

/// What the echo service needs of each connection handler, whatever its protocol.
pub(crate) trait EchoConn: ConnHandler {
    /// Marks a client connection whose setup failed as finished.
    fn setup_failed(&self);
    /// The connection's counters.
    fn counters(&self) -> ConnCounters;
    /// What the peer's reject says, in the ULP's terms, where the handler can
    /// read its private data (untrusted: `None` for anything else).
    fn explain_reject(&self, _data: &PrivateData) -> Option<Refused> {
        None
    }
    /// A client's connect succeeded, and so did or failed those of the
    /// endpoint's other clients: runs in process context and outside any
    /// callback, on the task of the last setup to end (a client task, or the
    /// enabling writer), unless the endpoint was disabled first; the
    /// connection may have ended meanwhile. Where a client posts its first
    /// batch: not in the CM's `ESTABLISHED` handler, which holds the id's
    /// handler mutex and the CM's worker.
    fn connected(&self, _conn: &Conn<Self>) {}
    /// The connection's watch, called by the endpoint's timer while the endpoint
    /// keeps the connection, in process context and without the endpoint's
    /// lock: returns in how many ms it wants to be called again, or `None`
    /// when it has nothing more to watch.
    fn tick(&self, _conn: &Conn<Self>) -> Option<u32> {
        None
    }
}

/// What `connections` shows of a connection an endpoint keeps, whatever its
/// handler type.
pub(crate) trait ConnView: Send + Sync {
    /// The connection's state.
    fn state(&self) -> ConnState;
    /// Its handler's counters.
    fn counters(&self) -> ConnCounters;
    /// The peer's address, written into `buf`, while the connection has one.
    fn peer<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str>;
    /// What its QP got.
    fn qp_attrs(&self) -> Result<QpAttrs>;
}

impl<H: EchoConn> ConnView for Conn<H> {
    fn state(&self) -> ConnState {
        Conn::state(self)
    }

    fn counters(&self) -> ConnCounters {
        self.handler().counters()
    }

    fn peer<'a>(&self, buf: &'a mut [u8; 64]) -> Option<&'a str> {
        Conn::peer(self, buf)
    }

    fn qp_attrs(&self) -> Result<QpAttrs> {
        Conn::qp_attrs(self)
    }
}

/// A connection an endpoint keeps, whatever its handler type.
pub(super) trait EpConn: ConnView {
    /// [`Conn::peer_answered`].
    fn peer_answered(&self) -> bool;
    fn close(&self);
    fn close_and_wait(&self);
    /// [`EchoConn::connected`]: the client's messages start.
    fn start(&self);
    /// [`EchoConn::tick`].
    fn tick(&self) -> Option<u32>;
    /// The same connection, seen only as a [`ConnView`] (no trait upcasting:
    /// it needs a newer compiler than the kernel's minimum).
    fn as_view(self: Arc<Self>) -> Arc<dyn ConnView>;
}

impl<H: EchoConn> EpConn for Conn<H> {
    fn peer_answered(&self) -> bool {
        Conn::peer_answered(self)
    }

    fn close(&self) {
        Conn::close(self)
    }

    fn close_and_wait(&self) {
        // Only fails inside a callback of the rdma layer or a `with_res`
        // closure; endpoints call this from process context.
        let _ = Conn::close_and_wait(self);
    }

    fn start(&self) {
        self.handler().connected(self)
    }

    fn tick(&self) -> Option<u32> {
        self.handler().tick(self)
    }

    fn as_view(self: Arc<Self>) -> Arc<dyn ConnView> {
        self
    }
}

/// A listener an endpoint keeps, whatever its handler type.
pub(crate) trait EpListener: Send + Sync {
    fn stop(&self);
    fn is_listening(&self) -> bool;
}

impl<L: crate::rdma::ListenHandler> EpListener for Listener<L> {
    fn stop(&self) {
        Listener::stop(self)
    }

    fn is_listening(&self) -> bool {
        Listener::is_listening(self)
    }
}
