// SPDX-License-Identifier: GPL-2.0

//! Must not build: `connect` on an accepted connection (once the misuse
//! fixture's case 2, refused at run time with `EINVAL`).
//!
//! An accepted connection reaches its ULP as an `Arc<Conn<_>>`, which has no
//! public `connect`: only the `Connector` of `Conn::new_active` connects.
//!
//! Expect: E0624

mod common;
#[path = "../../../../../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the case uses part of the layer")]
mod rdma;

use kernel::prelude::*;
use kernel::sync::Arc;
use rdma::{ConnParams, Listener, NetNs};

module! {
    type: Case,
    name: "cmecho_build_fail",
    authors: ["cmecho developers"],
    description: "A misuse of cmecho's rdma layer that must not build",
    license: "GPL",
}

/// The listener's handler: `accepted` below.
type Server = common::Server<fn(Arc<rdma::Conn<common::Peer>>)>;

struct Case(Arc<Listener<Server>>);

impl Drop for Case {
    fn drop(&mut self) {
        self.0.stop();
    }
}

fn accepted(conn: Arc<rdma::Conn<common::Peer>>) {
    let Ok(net) = NetNs::current() else { return };
    #[cfg(not(cmecho_control))]
    let _ = conn.connect(&net, c"10.77.0.1", 7190, common::QP);
    let _ = net;
    conn.close();
}

impl kernel::Module for Case {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let net = NetNs::current()?;
        let server = common::Server(accepted as fn(_));
        let l = Listener::listen(&net, c"10.77.0.1", 7190, ConnParams::default(), server)
            .map_err(|e| e.err)?;
        Ok(Self(l))
    }
}
