// SPDX-License-Identifier: GPL-2.0

//! What every build-must-fail case shares: a connection handler and a listener
//! handler that do nothing, so that a case is only its misuse.

use super::rdma::params::Ece;
use super::rdma::verbs::QpConfig;
use super::rdma::{
    Conn, ConnHandler, ConnectRequest, EndReason, ListenHandler, Reject, StepError, WcError,
};
use kernel::prelude::*;
use kernel::sync::Arc;

/// One of everything.
pub(crate) const QP: QpConfig = QpConfig {
    ntags: 1,
    nbufs: 1,
    max_send_wr: 1,
    max_recv_wr: 1,
};

/// A connection handler that does nothing.
pub(crate) struct Peer;

impl ConnHandler for Peer {
    fn setup(&self, _conn: &Conn<Self>) -> Result {
        Ok(())
    }

    fn completion(&self, _conn: &Conn<Self>, _tag: u32, _status: Result<u32, WcError>) {}

    fn established(&self, _conn: &Conn<Self>) {}

    fn ended(&self, conn: &Conn<Self>, _reason: EndReason) {
        conn.close();
    }
}

/// A listener handler that accepts every request and hands the accepted
/// connection to `accepted`.
pub(crate) struct Server<F: Fn(Arc<Conn<Peer>>) + Send + Sync + 'static>(pub(crate) F);

impl<F: Fn(Arc<Conn<Peer>>) + Send + Sync + 'static> ListenHandler for Server<F> {
    type Conn = Peer;

    fn qp_config(&self) -> QpConfig {
        QP
    }

    fn connect_request(
        &self,
        _req: &ConnectRequest,
    ) -> Result<(impl PinInit<Peer, Error>, Option<Ece>), Reject> {
        Ok((Ok::<_, Error>(Peer), None))
    }

    fn accepted(&self, conn: Arc<Conn<Peer>>) {
        (self.0)(conn)
    }

    fn accept_failed(&self, _err: StepError) {}

    fn removed(&self) {}
}
