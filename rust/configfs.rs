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

use crate::echo::rping::MAX_SIZE;
use crate::echo::{Addr, Endpoint, Role, MAX_CLIENTS, MAX_COUNT};
use crate::rdma::params::AckTimeout;
use kernel::configfs;
use kernel::configfs_attrs;
use kernel::fmt::Write as _;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::str::{kstrtobool_bytes, Formatter};

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
    configfs::Subsystem::new(c"cmecho", item_type, try_pin_init!(Root {}))
}

/// The data of the subsystem's root directory.
#[pin_data]
pub(crate) struct Root {}

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
            ],
        };
        Ok(configfs::Group::new(
            name.try_into()?,
            item_type,
            Endpoint::new(name)?,
        ))
    }
}

/// The trimmed text of a store, or a message for `last_error`.
fn text(page: &[u8]) -> Result<&str, &'static str> {
    core::str::from_utf8(page)
        .map(str::trim)
        .map_err(|_| "not valid UTF-8 text")
}

/// Parses a decimal number in `lo..=hi`.
fn number<T>(page: &[u8], lo: T, hi: T, msg: &'static str) -> Result<T, &'static str>
where
    T: core::str::FromStr + PartialOrd,
{
    let v: T = text(page)?.parse().map_err(|_| msg)?;
    if v < lo || v > hi {
        return Err(msg);
    }
    Ok(v)
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
            _ => return Err("must be server or client"),
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
        const MSG: &str = "must be an IPv4 or IPv6 address";
        let a = Addr::new(text(page)?).ok_or(MSG)?;
        if !crate::rdma::cm::valid_addr(a.as_cstr()) {
            return Err(MSG);
        }
        c.addr = Some(a);
        Ok(())
    }),
);

endpoint_attr!(2,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.port)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("port", |c| {
        c.port = number(page, 1u16, u16::MAX, "must be a port number 1..65535")?;
        Ok(())
    }),
);

endpoint_attr!(3,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.config(|c| match c.ack_timeout {
        Some(t) => writeln!(w, "{}", t),
        None => writeln!(w, "unset"),
    }),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("ack_timeout", |c| {
        const MSG: &str = "must be unset or 0..31 (4.096 us * 2^T; 0 disables the timer)";
        if text(page)? == "unset" {
            c.ack_timeout = None;
            return Ok(());
        }
        let t = number(page, 0u8, AckTimeout::MAX, MSG)?;
        c.ack_timeout = Some(AckTimeout::new(t).map_err(|_| MSG)?);
        Ok(())
    }),
);

endpoint_attr!(4,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.count)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("count", |c| {
        c.count = number(page, 1u64, MAX_COUNT, "must be 1..10000000")?;
        Ok(())
    }),
);

endpoint_attr!(5,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.size)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("size", |c| {
        c.size = number(page, 1u32, MAX_SIZE, "must be 1..65536 bytes")?;
        Ok(())
    }),
);

endpoint_attr!(6,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", ep.config(|c| c.clients)),
    store: |ep: &Endpoint, page: &[u8]| ep.configure("clients", |c| {
        c.clients = number(page, 1u32, MAX_CLIENTS, "must be 1..64")?;
        Ok(())
    }),
);

endpoint_attr!(7,
    show: |ep: &Endpoint, w: &mut Formatter<'_>| writeln!(w, "{}", u8::from(ep.enabled())),
    store: |ep: &Endpoint, page: &[u8]| match kstrtobool_bytes(page) {
        Ok(on) => ep.set_enabled(on),
        Err(_) => Err(ep.invalid("enable", "must be 0 or 1")),
    },
);

endpoint_attr!(8, show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.show_state(w));
endpoint_attr!(9, show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.show_stats(w));
endpoint_attr!(10, show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.show_qp_attrs(w));
endpoint_attr!(11, show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.show_last_error(w));
endpoint_attr!(12, show: |ep: &Endpoint, w: &mut Formatter<'_>| ep.show_netns(w));
