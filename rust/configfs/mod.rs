// SPDX-License-Identifier: GPL-2.0

//! The configfs interface of cmecho: `/sys/kernel/config/cmecho`.
//!
//! `mkdir /sys/kernel/config/cmecho/<name>` creates an endpoint in the network
//! namespace of the process that runs `mkdir`; `rmdir` tears it down with its live
//! connections. Each attribute is one `AttributeOperations<N>` below; the ABI is
//! documented in `Documentation/ABI/testing/configfs-cmecho`.
//!
//! A store parses the page, and either changes the endpoint or changes nothing and
//! fails: `EINVAL` for a bad value, `EBUSY` while the endpoint is enabled. Either
//! failure also sets `last_error`.
//!
//! The text of the attributes that show what an endpoint does is in [`format`].

mod format;

pub(crate) use format::conn_line;

use crate::echo::limits::{self, Limit, Refusal};
use crate::echo::{Addr, Endpoint, Mode, Role};
use crate::rdma::params::{AckTimeout, MinRnrTimer, PollContext, RetryCount};
use kernel::configfs;
use kernel::configfs_attrs;
use kernel::fmt::Write as _;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::str::Formatter;

/// Creates the `cmecho` configfs subsystem.
pub(crate) fn subsystem() -> impl PinInit<configfs::Subsystem<Root>, Error> {
    let item_type = configfs_attrs! {
        container: configfs::Subsystem<Root>,
        data: Root,
        child: Endpoint,
        attributes: [
            version: 0,
        ],
    };
    configfs::Subsystem::new(
        c"cmecho",
        item_type,
        try_pin_init!(Root {
            debugfs: crate::debugfs::Root::new()?,
        }),
    )
}

/// The data of the subsystem's root directory.
#[pin_data]
pub(crate) struct Root {
    /// `/sys/kernel/debug/cmecho`, where each endpoint lists its connections.
    debugfs: crate::debugfs::Root,
}

#[vtable]
impl configfs::AttributeOperations<0> for Root {
    type Data = Root;

    /// `version`: the module's version, read-only.
    fn show(_this: &Root, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        let mut writer = Formatter::new(page);
        writeln!(writer, "{}", crate::VERSION)?;
        Ok(writer.bytes_written())
    }
}

#[vtable]
impl configfs::GroupOperations for Root {
    type Child = Endpoint;

    fn make_group(&self, name: &CStr) -> Result<impl PinInit<configfs::Group<Endpoint>, Error>> {
        let item_type = configfs_attrs! {
            container: configfs::Group<Endpoint>,
            data: Endpoint,
            attributes: [
                role: 0,
                addr: 1,
                port: 2,
                ack_timeout: 3,
                count: 4,
                size: 5,
                clients: 6,
                enable: 7,
                state: 8,
                stats: 9,
                qp_attrs: 10,
                last_error: 11,
                netns: 12,
                min_rnr_timer: 13,
                retry_count: 14,
                rnr_retry_count: 15,
                tos: 16,
                ece_vendor_id: 17,
                ece_attr_mod: 18,
                ece_policy: 19,
                initiator_depth: 20,
                responder_resources: 21,
                max_conns: 22,
                remote_ece: 23,
                connections: 24,
                mode: 25,
                depth: 26,
                duration_ms: 27,
                mem_budget_kib: 28,
                resolve_timeout_ms: 29,
                resolve_retries: 30,
                connect_timeout_ms: 31,
                accept_timeout_ms: 32,
                echo_timeout_ms: 33,
                busy_poll_us: 34,
                poll_context: 35,
            ],
        };
        Ok(configfs::Group::new(
            name.try_into()?,
            item_type,
            Endpoint::new(name, &self.debugfs)?,
        ))
    }
}

/// The trimmed text of a store, or a message for `last_error`.
fn text(page: &[u8]) -> Result<&str, &'static str> {
    core::str::from_utf8(page)
        .map(str::trim)
        .map_err(|_| "not valid UTF-8 text")
}

/// Parses a decimal number within `l`.
fn number<T: TryFrom<u64>>(page: &[u8], l: &'static Limit) -> Result<T, Refusal> {
    let bad = Refusal::Range(l, false);
    let v: u64 = text(page)?.parse().map_err(|_| bad)?;
    if !l.holds(v) {
        return Err(bad);
    }
    T::try_from(v).map_err(|_| bad)
}

/// Parses `unset` as `None`, else a number within `l` (decimal, or hex with
/// `0x`).
fn opt_number<T: TryFrom<u64>>(page: &[u8], l: &'static Limit) -> Result<Option<T>, Refusal> {
    let bad = Refusal::Range(l, true);
    let t = text(page)?;
    if t == "unset" {
        return Ok(None);
    }
    let v = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    }
    .map_err(|_| bad)?;
    if !l.holds(v) {
        return Err(bad);
    }
    T::try_from(v).map(Some).map_err(|_| bad)
}

/// An optional value of a type whose constructor checks it (`new`), read as
/// [`opt_number`] reads it; the constructor's refusal is the knob's range too.
fn opt_value<T>(
    page: &[u8],
    l: &'static Limit,
    new: impl FnOnce(u8) -> Result<T>,
) -> Result<Option<T>, Refusal> {
    opt_number(page, l)?
        .map(new)
        .transpose()
        .map_err(|_| Refusal::Range(l, true))
}

/// Writes an optional value, `unset` for `None`.
fn show_opt<T: core::fmt::Display>(w: &mut Formatter<'_>, v: Option<T>) -> core::fmt::Result {
    match v {
        Some(v) => writeln!(w, "{}", v),
        None => writeln!(w, "unset"),
    }
}

/// Writes an optional value in hex, `unset` for `None`.
fn show_opt_hex(w: &mut Formatter<'_>, v: Option<u32>) -> core::fmt::Result {
    match v {
        Some(v) => writeln!(w, "{:#x}", v),
        None => writeln!(w, "unset"),
    }
}

/// Formats one value and a newline into the page.
fn show_with(
    page: &mut [u8; PAGE_SIZE],
    f: impl FnOnce(&mut Formatter<'_>) -> core::fmt::Result,
) -> Result<usize> {
    let mut w = Formatter::new(page);
    f(&mut w)?;
    Ok(w.bytes_written())
}

/// Implements one attribute of [`Endpoint`]: `show` always, `store` when given.
macro_rules! endpoint_attr {
    ($id:literal, show: $show:expr $(, store: $store:expr)? $(,)?) => {
        #[vtable]
        impl configfs::AttributeOperations<$id> for Endpoint {
            type Data = Endpoint;

            fn show(ep: &Endpoint, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
                show_with(page, |w| ($show)(ep, w))
            }

            $(
                fn store(ep: &Endpoint, page: &[u8]) -> Result {
                    ($store)(ep, page)
                }
            )?
        }
    };
}

endpoint_attr!(0,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| {
        let r = ep.config(|c| c.role);
        writeln!(w, "{}", if r == Role::Server { "server" } else { "client" })
    },
    store: |ep: &Endpoint, page: &[u8]| ep.configure("role", |c| {
        c.role = match text(page)? {
            "server" => Role::Server,
            "client" => Role::Client,
            _ => return Err("must be server or client".into()),
        };
        Ok(())
    }),
);

endpoint_attr!(1,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.config(|c| match &c.addr {
        Some(a) => writeln!(w, "{}", a.as_str()),
        None => writeln!(w, "unset"),
    }),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("addr", |c| {
        const MSG: Refusal = Refusal::Text("must be an IPv4 or IPv6 address");
        let a = Addr::new(text(page)?).ok_or(MSG)?;
        if !ep.valid_addr(&a) {
            return Err(MSG);
        }
        c.addr = Some(a);
        Ok(())
    }),
);

endpoint_attr!(2,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.port)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("port", |c| {
        c.port = number(page, &limits::PORT)?;
        Ok(())
    }),
);

endpoint_attr!(3,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.config(|c| match c.ack_timeout {
        Some(t) => writeln!(w, "{}", t),
        None => writeln!(w, "unset"),
    }),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("ack_timeout", |c| {
        let bad = Refusal::Range(&limits::ACK_TIMEOUT, true);
        if text(page)? == "unset" {
            c.ack_timeout = None;
            return Ok(());
        }
        let t = number(page, &limits::ACK_TIMEOUT).map_err(|_| bad)?;
        c.ack_timeout = Some(AckTimeout::new(t).map_err(|_| bad)?);
        Ok(())
    }),
);

endpoint_attr!(4,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.count)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("count", |c| {
        c.count = number(page, &limits::COUNT)?;
        Ok(())
    }),
);

endpoint_attr!(5,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.size)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("size", |c| {
        c.size = number(page, &limits::SIZE)?;
        Ok(())
    }),
);

endpoint_attr!(6,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.clients)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("clients", |c| {
        c.clients = number(page, &limits::CLIENTS)?;
        Ok(())
    }),
);

endpoint_attr!(7,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", u8::from(ep.enabled())),
    store: |ep: &Endpoint, page: &[u8]| match text(page) {
        Ok("1") => ep.set_enabled(true),
        Ok("0") => ep.set_enabled(false),
        _ => Err(ep.invalid("enable", "must be 0 or 1")),
    },
);

endpoint_attr!(8, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::state(ep, w));
endpoint_attr!(9, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::stats(ep, w));
endpoint_attr!(10, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::qp_attrs(ep, w));
endpoint_attr!(11, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::last_error(ep, w));
endpoint_attr!(12, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::netns(ep, w));

endpoint_attr!(13,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.min_rnr_timer)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("min_rnr_timer", |c| {
        c.min_rnr_timer = opt_value(page, &limits::MIN_RNR_TIMER, MinRnrTimer::new)?;
        Ok(())
    }),
);

endpoint_attr!(14,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.retry_count)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("retry_count", |c| {
        c.retry_count = opt_value(page, &limits::RETRY_COUNT, RetryCount::new)?;
        Ok(())
    }),
);

endpoint_attr!(15,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.rnr_retry_count)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("rnr_retry_count", |c| {
        c.rnr_retry_count = opt_value(page, &limits::RNR_RETRY_COUNT, RetryCount::new)?;
        Ok(())
    }),
);

endpoint_attr!(16,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.tos)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("tos", |c| {
        c.tos = opt_number(page, &limits::TOS)?;
        Ok(())
    }),
);

endpoint_attr!(17,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt_hex(w, ep.config(|c| c.ece_vendor_id)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("ece_vendor_id", |c| {
        c.ece_vendor_id = opt_number(page, &limits::ECE_VENDOR_ID)?;
        Ok(())
    }),
);

endpoint_attr!(18,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt_hex(w, ep.config(|c| c.ece_attr_mod)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("ece_attr_mod", |c| {
        c.ece_attr_mod = opt_number(page, &limits::ECE_ATTR_MOD)?;
        Ok(())
    }),
);

endpoint_attr!(19,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| {
        writeln!(w, "{}", if ep.config(|c| c.ece_strict) { "strict" } else { "relaxed" })
    },
    store: |ep: &Endpoint, page: &[u8]| ep.configure("ece_policy", |c| {
        c.ece_strict = match text(page)? {
            "strict" => true,
            "relaxed" => false,
            _ => return Err("must be relaxed or strict".into()),
        };
        Ok(())
    }),
);

endpoint_attr!(20,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.initiator_depth)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("initiator_depth", |c| {
        c.initiator_depth = opt_number(page, &limits::RD_ATOMIC)?;
        Ok(())
    }),
);

endpoint_attr!(21,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.responder_resources)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("responder_resources", |c| {
        c.responder_resources = opt_number(page, &limits::RD_ATOMIC)?;
        Ok(())
    }),
);

endpoint_attr!(22,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.max_conns)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("max_conns", |c| {
        c.max_conns = number(page, &limits::MAX_CONNS)?;
        Ok(())
    }),
);

endpoint_attr!(23, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::remote_ece(ep, w));
endpoint_attr!(24, show: |ep: &Endpoint, w: &mut Formatter<'_>| format::connections(ep, w));

endpoint_attr!(25,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| {
        writeln!(w, "{}", ep.config(|c| c.mode).ops().name)
    },
    store: |ep: &Endpoint, page: &[u8]| ep.configure("mode", |c| {
        c.mode = Mode::by_name(text(page)?).ok_or(Refusal::Mode)?;
        Ok(())
    }),
);

endpoint_attr!(26,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.depth)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("depth", |c| {
        c.depth = number(page, &limits::DEPTH)?;
        Ok(())
    }),
);

endpoint_attr!(27,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| show_opt(w, ep.config(|c| c.duration_ms)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("duration_ms", |c| {
        c.duration_ms = opt_number(page, &limits::DURATION_MS)?;
        Ok(())
    }),
);

endpoint_attr!(28,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.mem_budget_kib)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("mem_budget_kib", |c| {
        c.mem_budget_kib = number(page, &limits::MEM_BUDGET_KIB)?;
        Ok(())
    }),
);

endpoint_attr!(29,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.resolve_timeout_ms)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("resolve_timeout_ms", |c| {
        c.resolve_timeout_ms = number(page, &limits::RESOLVE_TIMEOUT_MS)?;
        Ok(())
    }),
);

endpoint_attr!(30,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.resolve_retries)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("resolve_retries", |c| {
        c.resolve_retries = number(page, &limits::RESOLVE_RETRIES)?;
        Ok(())
    }),
);

endpoint_attr!(31,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.connect_timeout_ms)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("connect_timeout_ms", |c| {
        c.connect_timeout_ms = number(page, &limits::CONNECT_TIMEOUT_MS)?;
        Ok(())
    }),
);

endpoint_attr!(32,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.accept_timeout_ms)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("accept_timeout_ms", |c| {
        c.accept_timeout_ms = number(page, &limits::ACCEPT_TIMEOUT_MS)?;
        Ok(())
    }),
);

endpoint_attr!(33,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.echo_timeout_ms)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("echo_timeout_ms", |c| {
        c.echo_timeout_ms = number(page, &limits::ECHO_TIMEOUT_MS)?;
        Ok(())
    }),
);

endpoint_attr!(34,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.busy_poll_us)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("busy_poll_us", |c| {
        c.busy_poll_us = number(page, &limits::BUSY_POLL_US)?;
        Ok(())
    }),
);

endpoint_attr!(35,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| {
        writeln!(w, "{}", ep.config(|c| c.poll_context).name())
    },
    store: |ep: &Endpoint, page: &[u8]| ep.configure("poll_context", |c| {
        c.poll_context = PollContext::by_name(text(page)?)
            .ok_or("must be workqueue, unbound_workqueue or softirq")?;
        Ok(())
    }),
);
