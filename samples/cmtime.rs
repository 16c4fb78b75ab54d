// SPDX-License-Identifier: GPL-2.0

//! cmtime: times each RDMA CM step over N connections, like rdma-core's `cmtime`.
//!
//! A sample of using cmecho's `rdma` layer the way a third-party ULP would: it
//! builds the layer from the same sources (`#[path]`), gives every connection its
//! parameters up front in `ConnParams`, and only calls the public API. At load it
//! connects `conns` times, one after the other, to `addr`:`port` from the network
//! namespace of the loading process, and logs min/avg/max per step:
//!
//! ```text
//! ip netns exec b insmod cmecho_cmtime.ko addr=10.77.0.1 port=7174 conns=50
//! ```
//!
//! Any RDMA CM listener works as the peer, e.g. a cmecho server endpoint.

#[path = "../rust/rdma/mod.rs"]
#[allow(dead_code, reason = "the sample uses part of the layer")]
mod rdma;

use kernel::prelude::*;
use kernel::time::{Delta, Instant, Monotonic};
use rdma::cm::{Conn, ConnHandler, ConnParams, EndReason, NetNs};
use rdma::params::AckTimeout;
use rdma::verbs::{QpConfig, WcError};

module! {
    type: CmTime,
    name: "cmecho_cmtime",
    authors: ["cmecho developers"],
    description: "Times RDMA CM steps through cmecho's Rust layer",
    license: "GPL",
    params: {
        port: u16 {
            default: 7174,
            description: "Port of the listener",
        },
        conns: u32 {
            default: 10,
            description: "Connections to time, one after the other (1..1000)",
        },
        ack_timeout: u8 {
            default: 14,
            description: "Ack timeout exponent applied to every connection (0..31)",
        },
    },
}

extern "C" {
    fn cmtime_addr() -> *const kernel::ffi::c_char;
}

/// The handler of a timed connection: it sends nothing.
struct Quiet;

impl ConnHandler for Quiet {
    fn setup(&self, _conn: &Conn<Self>) -> Result {
        Ok(())
    }
    fn completion(&self, _conn: &Conn<Self>, _tag: u32, _status: Result<u32, WcError>) {}
    fn established(&self, _conn: &Conn<Self>) {}
    fn ended(&self, _conn: &Conn<Self>, _reason: EndReason) {}
}

/// The steps timed, in order.
const STEPS: [&str; 7] = [
    "create_id",
    "resolve_addr",
    "resolve_route",
    "create_qp",
    "connect",
    "disconnect",
    "destroy",
];

/// Min, sum and max of one step, in µs.
#[derive(Clone, Copy)]
struct Acc {
    min: i64,
    sum: i64,
    max: i64,
}

impl Acc {
    const EMPTY: Self = Self {
        min: i64::MAX,
        sum: 0,
        max: 0,
    };

    fn add(&mut self, d: Delta) {
        let us = d.as_micros_ceil();
        self.min = self.min.min(us);
        self.max = self.max.max(us);
        self.sum += us;
    }
}

/// How long a disconnect may take before the connection counts as failed.
const DISCONNECT_MS: u32 = 30_000;

/// Times one connection; returns the durations of the steps in [`STEPS`] order.
fn time_one(net: &NetNs, addr: &CStr, params: ConnParams) -> Result<[Delta; 7]> {
    let qp = QpConfig {
        ntags: 1,
        nbufs: 1,
        max_send_wr: 1,
        max_recv_wr: 1,
    };
    let conn = Conn::new_active(Ok::<_, Error>(Quiet), params)?;
    if let Err(e) = conn.connect(net, addr, module_parameters::port.value(), qp) {
        pr_warn!("connect failed at {}: {:?}\n", e.step, e.err);
        return Err(e.err);
    }
    let s = conn.setup_times();
    let t = Instant::<Monotonic>::now();
    // The DREP comes back within the CM's response timeout; a loaded guest
    // can take seconds. A disconnect that fails is reported, not swallowed.
    let disc = conn.disconnect_and_wait(DISCONNECT_MS);
    let disconnect = t.elapsed();
    let t = Instant::<Monotonic>::now();
    if let Err(e) = conn.close_and_wait() {
        pr_warn!("close failed: {:?}\n", e);
        return Err(e);
    }
    let destroy = t.elapsed();
    if let Err(e) = disc {
        pr_warn!(
            "disconnect failed at {}: {:?} after {} ms\n",
            e.step,
            e.err,
            disconnect.as_millis()
        );
        return Err(e.err);
    }
    Ok([
        s.create_id,
        s.resolve_addr,
        s.resolve_route,
        s.create_qp,
        s.connect,
        disconnect,
        destroy,
    ])
}

struct CmTime {
    _wq: rdma::WorkQueue,
}

impl kernel::Module for CmTime {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let wq = rdma::WorkQueue::new()?;
        let n = module_parameters::conns.value();
        if !(1..=1000).contains(&n) {
            pr_err!("conns must be 1..1000, not {}\n", n);
            return Err(EINVAL);
        }
        let mut params = ConnParams::rping();
        params.ack_timeout = Some(AckTimeout::new(module_parameters::ack_timeout.value())?);
        // SAFETY: `cmtime_addr` returns the module parameter's NUL-terminated buffer,
        // which lives as long as the module.
        let addr = unsafe { CStr::from_char_ptr(cmtime_addr()) };
        let net = NetNs::current()?;
        let mut acc = [Acc::EMPTY; 7];
        let mut ok = 0u32;
        for _ in 0..n {
            if let Ok(d) = time_one(&net, addr, params) {
                for (a, d) in acc.iter_mut().zip(d) {
                    a.add(d);
                }
                ok += 1;
            }
        }
        pr_info!(
            "{} of {} connections to {}:{} ok (netns {})\n",
            ok,
            n,
            addr.to_str().unwrap_or("?"),
            module_parameters::port.value(),
            net.inum()
        );
        if ok > 0 {
            for (name, a) in STEPS.iter().zip(acc) {
                pr_info!(
                    "step {} min {} avg {} max {} us\n",
                    name,
                    a.min,
                    a.sum / i64::from(ok),
                    a.max
                );
            }
        }
        Ok(Self { _wq: wq })
    }
}
