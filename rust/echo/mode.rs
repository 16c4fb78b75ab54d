// SPDX-License-Identifier: GPL-2.0

//! The modes of the echo service, as a table.
//!
//! A mode is one module (`rping`, `native`) with a client side that starts
//! connections and a server side that is a [`ServerMode`]; [`ModeOps`] is what
//! the rest of the service knows of it. Adding a mode is that module, its
//! variant in [`Mode`] and its line in [`Mode::ops`]: the endpoint, admission
//! and configfs take everything else from the table.

use super::config::{Addr, Config, Mode};
use super::endpoint::{EchoConn, EpListener, Shared};
use super::{native, rping};
use crate::rdma::params::Ece;
use crate::rdma::verbs::QpConfig;
use crate::rdma::{Conn, ConnectRequest, ListenHandler, Listener, Reject, StepError};
use kernel::prelude::*;
use kernel::sync::Arc;

/// [`ModeOps::listen`]: listens for the server endpoint `shared` configured
/// with `cfg` on `addr`.
pub(crate) type ListenFn =
    fn(&Arc<Shared>, &Config, &Addr) -> Result<Arc<dyn EpListener>, StepError>;

/// What the service needs of a mode.
pub(crate) struct ModeOps {
    /// The name `mode` reads and accepts.
    pub(crate) name: &'static str,
    /// The buffer memory one connection of an endpoint configured with it
    /// holds, in bytes: what admission counts.
    pub(crate) conn_buf_bytes: fn(&Config) -> u64,
    /// Listens for a server endpoint on `addr`.
    pub(crate) listen: ListenFn,
    /// Starts client connection `index` of a client endpoint.
    pub(crate) start: fn(&Arc<Shared>, &Config, &Addr, u32) -> Result,
}

impl Mode {
    /// Every mode, in the order the ABI lists them.
    pub(crate) const ALL: [Mode; 2] = [Mode::Rping, Mode::Echo];

    /// The mode's table.
    pub(crate) fn ops(self) -> &'static ModeOps {
        match self {
            Mode::Rping => &rping::OPS,
            Mode::Echo => &native::OPS,
        }
    }

    /// The mode named `name`.
    pub(crate) fn by_name(name: &str) -> Option<Mode> {
        Self::ALL.into_iter().find(|m| m.ops().name == name)
    }
}

/// A mode's server side: what it adds to the listener every mode shares
/// ([`ModeListen`]).
pub(crate) trait ServerMode: Send + Sync + Sized + 'static {
    /// The handler of a connection it accepts.
    type Conn: EchoConn;

    /// The server side of an endpoint configured with `cfg`.
    fn new(cfg: &Config) -> Self;

    /// The QP of each connection.
    fn qp_config(&self) -> QpConfig;

    /// Refuses a request the mode cannot serve, before anything is admitted
    /// or allocated for it. Optional: the default takes every request.
    fn check(&self, _shared: &Shared, _req: &ConnectRequest) -> Result<(), Reject> {
        Ok(())
    }

    /// The handler of an admitted connection.
    fn conn(&self, shared: &Arc<Shared>) -> impl PinInit<Self::Conn, Error>;
}

/// The listener of every mode: the mode checks a request and makes its
/// connection's handler; the endpoint admits it, keeps it and hears of
/// failures and the device's removal.
pub(crate) struct ModeListen<M: ServerMode> {
    shared: Arc<Shared>,
    mode: M,
}

impl<M: ServerMode> ListenHandler for ModeListen<M> {
    type Conn = M::Conn;

    fn qp_config(&self) -> QpConfig {
        self.mode.qp_config()
    }

    fn connect_request(
        &self,
        req: &ConnectRequest,
    ) -> Result<(impl PinInit<M::Conn, Error>, Option<Ece>), Reject> {
        self.mode.check(&self.shared, req)?;
        let answer = self.shared.admit(req)?;
        Ok((self.mode.conn(&self.shared), answer))
    }

    fn accepted(&self, conn: Arc<Conn<M::Conn>>) {
        self.shared.accepted(conn);
    }

    fn accept_failed(&self, err: StepError) {
        self.shared.accept_failed(&err);
    }

    fn removed(&self) {
        self.shared.listener_removed();
    }
}

/// [`ModeOps::listen`] of a mode whose server side is `M`.
pub(crate) fn listen<M: ServerMode>(
    sh: &Arc<Shared>,
    cfg: &Config,
    addr: &Addr,
) -> Result<Arc<dyn EpListener>, StepError> {
    let handler = ModeListen {
        shared: sh.clone(),
        mode: M::new(cfg),
    };
    let params = cfg.conn_params();
    Listener::listen(sh.net(), addr.as_cstr(), cfg.port, params, handler)
        .map(|l| l as Arc<dyn EpListener>)
}
