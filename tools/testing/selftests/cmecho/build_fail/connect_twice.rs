// SPDX-License-Identifier: GPL-2.0

//! Must not build: a second `connect` of the same connection (refused at run
//! time with `ECONNABORTED` before).
//!
//! `Connector::connect` consumes its `Connector`, the only one there is.
//!
//! Expect: E0382

mod common;
#[path = "../../../../../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the case uses part of the layer")]
mod rdma;

use kernel::prelude::*;
use rdma::{Conn, ConnParams, NetNs};

module! {
    type: Case,
    name: "cmecho_build_fail",
    authors: ["cmecho developers"],
    description: "A misuse of cmecho's rdma layer that must not build",
    license: "GPL",
}

struct Case;

impl kernel::Module for Case {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let net = NetNs::current()?;
        let connector = Conn::new_active(Ok::<_, Error>(common::Peer), ConnParams::default())?;
        let conn = connector.conn().clone();
        let _ = connector.connect(&net, c"10.77.0.1", 7190, common::QP);
        #[cfg(not(cmecho_control))]
        let _ = connector.connect(&net, c"10.77.0.1", 7190, common::QP);
        conn.close();
        Ok(Self)
    }
}
