// SPDX-License-Identifier: GPL-2.0

//! cmecho: a safe Rust API over the RDMA connection manager and an echo service on it.
//!
//! The crate root is a list of modules: `rdma` is the only one that holds `unsafe`.

mod configfs;
mod debugfs;
mod echo;
mod rdma;

use kernel::prelude::*;

/// The version of cmecho, shown at load and in `/sys/kernel/config/cmecho/version`.
pub(crate) const VERSION: &str = "0.1.0";

/// The ack timeout exponent the load-time probe sets (the RoCE default).
const PROBE_ACK_TIMEOUT: u8 = 17;

module! {
    type: CmEcho,
    name: "cmecho",
    authors: ["cmecho developers"],
    description: "RDMA CM echo service with ack timeouts set in time",
    license: "GPL",
}

#[pin_data]
struct CmEcho {
    /// Proof that the load-time RDMA CM probe passed; initialised first.
    _probe: (),
    /// The configfs subsystem; dropped first, tearing every endpoint down.
    #[pin]
    subsystem: kernel::configfs::Subsystem<configfs::Root>,
    /// The module's workqueue; initialised before, dropped after everything else.
    _wq: rdma::WorkQueue,
}

/// Runs the load-time RDMA CM probe and says how it went.
fn probe() -> Result {
    match rdma::params::AckTimeout::new(PROBE_ACK_TIMEOUT).and_then(rdma::probe_cm) {
        Ok(()) => {
            pr_info!("version {} loaded (RDMA CM probe ok)\n", VERSION);
            Ok(())
        }
        Err(e) => {
            pr_err!("version {}: RDMA CM probe failed: {:?}\n", VERSION, e);
            Err(e)
        }
    }
}

impl kernel::InPlaceModule for CmEcho {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _probe: probe()?,
            _wq: rdma::WorkQueue::new()?,
            subsystem <- configfs::subsystem(),
        })
    }
}
