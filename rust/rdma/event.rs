// SPDX-License-Identifier: GPL-2.0

//! CM events, decoded from `struct rdma_cm_event` into plain values.
//!
//! The layer reads the event's fields from bindgen's layout of the struct, maps the event's
//! `enum rdma_cm_event_type` to the few kinds it tells apart ([`EventKind`]),
//! and copies out everything an event carries that it uses, so no pointer into
//! the event outlives its handler.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::ffi;
use super::params::{Ece, PrivateData};
use kernel::ffi::c_int;
use kernel::str::CStr;

/// A CM event, decoded from `struct rdma_cm_event`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    /// What happened.
    pub(crate) kind: EventKind,
    /// The event's status (a negative errno, or the IB CM reject reason).
    pub(crate) status: i32,
    /// The peer's ECE, where the event carries one.
    pub(crate) ece: Ece,
    /// The peer's initiator depth, on a connect request.
    pub(crate) initiator_depth: u8,
    /// The peer's responder resources, on a connect request.
    pub(crate) responder_resources: u8,
    /// The private data of a connect request or a reject (as much as
    /// [`PrivateData::MAX`] holds), as the peer sent it: untrusted. Empty on
    /// other events.
    pub(crate) private_data: PrivateData,
}

/// The CM events cmecho distinguishes (from `enum rdma_cm_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`.
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`.
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// Any other code: the events the layer does not use (connect response,
    /// multicast, address change, address info, user and internal events) and
    /// codes the CM does not define.
    Other,
}

impl EventKind {
    /// The kind of an `enum rdma_cm_event_type` code.
    fn from_code(code: c_int) -> Self {
        match code {
            ffi::RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            ffi::RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            ffi::RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            ffi::RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            ffi::RDMA_CM_EVENT_CONNECT_REQUEST => Self::ConnectRequest,
            ffi::RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            ffi::RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            ffi::RDMA_CM_EVENT_REJECTED => Self::Rejected,
            ffi::RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            ffi::RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            ffi::RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            ffi::RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            _ => Self::Other,
        }
    }

    /// The event's name, as the CM calls it.
    pub(crate) fn name(self) -> &'static str {
        // ASCII: valid UTF-8.
        self.c_name().to_str().unwrap_or("?")
    }

    /// The event's name, as the CM calls it, as a C string (for a tracepoint).
    pub(crate) fn c_name(self) -> &'static CStr {
        match self {
            Self::AddrResolved => c"ADDR_RESOLVED",
            Self::AddrError => c"ADDR_ERROR",
            Self::RouteResolved => c"ROUTE_RESOLVED",
            Self::RouteError => c"ROUTE_ERROR",
            Self::ConnectRequest => c"CONNECT_REQUEST",
            Self::ConnectError => c"CONNECT_ERROR",
            Self::Unreachable => c"UNREACHABLE",
            Self::Rejected => c"REJECTED",
            Self::Established => c"ESTABLISHED",
            Self::Disconnected => c"DISCONNECTED",
            Self::DeviceRemoval => c"DEVICE_REMOVAL",
            Self::TimewaitExit => c"TIMEWAIT_EXIT",
            Self::Other => c"OTHER",
        }
    }
}

impl Event {
    /// Decodes an event.
    ///
    /// # Safety
    ///
    /// `ev` must point to a valid `struct rdma_cm_event`.
    pub(super) unsafe fn read(ev: *const ffi::RdmaCmEvent) -> Self {
        // SAFETY: The caller guarantees `ev` is valid; it is only read, during
        // the handler that got it.
        let e = unsafe { &*ev };
        let kind = EventKind::from_code(c_int::try_from(e.event).unwrap_or(-1));
        // The connection parameters of the event (a union member) are the peer's
        // on a connect request and a reject only; `conn` is the member the CM
        // fills in for a connected (RDMA_PS_TCP) id's events.
        let conn = matches!(kind, EventKind::ConnectRequest | EventKind::Rejected)
            // SAFETY: As said, `conn` is the member written for these events.
            .then(|| unsafe { &e.param.conn });
        let (initiator_depth, responder_resources) = match conn {
            Some(c) if kind == EventKind::ConnectRequest => {
                (c.initiator_depth, c.responder_resources)
            }
            _ => (0, 0),
        };
        let private_data = match conn {
            Some(c) if !c.private_data.is_null() => {
                let n = usize::from(c.private_data_len).min(PrivateData::MAX);
                let mut buf = [0u8; PrivateData::MAX];
                // SAFETY: The CM's private data of the event is `private_data_len`
                // readable bytes at `private_data` while its handler runs, and
                // `n` is at most that.
                buf[..n].copy_from_slice(unsafe {
                    core::slice::from_raw_parts(c.private_data.cast::<u8>(), n)
                });
                PrivateData::from_buf(buf, n)
            }
            _ => PrivateData::EMPTY,
        };
        Self {
            kind,
            status: e.status,
            ece: Ece {
                vendor_id: e.ece.vendor_id,
                attr_mod: e.ece.attr_mod,
            },
            initiator_depth,
            responder_resources,
            private_data,
        }
    }
}

#[kernel::prelude::kunit_tests(cmecho_event)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_their_kinds() {
        let all = [
            (
                ffi::RDMA_CM_EVENT_ADDR_RESOLVED,
                EventKind::AddrResolved,
                "ADDR_RESOLVED",
            ),
            (
                ffi::RDMA_CM_EVENT_ADDR_ERROR,
                EventKind::AddrError,
                "ADDR_ERROR",
            ),
            (
                ffi::RDMA_CM_EVENT_ROUTE_RESOLVED,
                EventKind::RouteResolved,
                "ROUTE_RESOLVED",
            ),
            (
                ffi::RDMA_CM_EVENT_ROUTE_ERROR,
                EventKind::RouteError,
                "ROUTE_ERROR",
            ),
            (
                ffi::RDMA_CM_EVENT_CONNECT_REQUEST,
                EventKind::ConnectRequest,
                "CONNECT_REQUEST",
            ),
            (
                ffi::RDMA_CM_EVENT_CONNECT_ERROR,
                EventKind::ConnectError,
                "CONNECT_ERROR",
            ),
            (
                ffi::RDMA_CM_EVENT_UNREACHABLE,
                EventKind::Unreachable,
                "UNREACHABLE",
            ),
            (ffi::RDMA_CM_EVENT_REJECTED, EventKind::Rejected, "REJECTED"),
            (
                ffi::RDMA_CM_EVENT_ESTABLISHED,
                EventKind::Established,
                "ESTABLISHED",
            ),
            (
                ffi::RDMA_CM_EVENT_DISCONNECTED,
                EventKind::Disconnected,
                "DISCONNECTED",
            ),
            (
                ffi::RDMA_CM_EVENT_DEVICE_REMOVAL,
                EventKind::DeviceRemoval,
                "DEVICE_REMOVAL",
            ),
            (
                ffi::RDMA_CM_EVENT_TIMEWAIT_EXIT,
                EventKind::TimewaitExit,
                "TIMEWAIT_EXIT",
            ),
        ];
        for (code, kind, name) in all {
            assert_eq!(EventKind::from_code(code), kind);
            assert_eq!(kind.name(), name);
        }
    }

    #[test]
    fn other_codes_are_other() {
        // The codes cmecho does not tell apart, as C defines them (`c_uint`), and
        // codes the CM does not define.
        let others = [
            ffi::RDMA_CM_EVENT_CONNECT_RESPONSE as c_int,
            ffi::RDMA_CM_EVENT_MULTICAST_JOIN as c_int,
            ffi::RDMA_CM_EVENT_MULTICAST_ERROR as c_int,
            ffi::RDMA_CM_EVENT_ADDR_CHANGE as c_int,
            ffi::RDMA_CM_EVENT_ADDRINFO_RESOLVED as c_int,
            ffi::RDMA_CM_EVENT_ADDRINFO_ERROR as c_int,
            ffi::RDMA_CM_EVENT_USER as c_int,
            ffi::RDMA_CM_EVENT_INTERNAL as c_int,
            -1,
            ffi::RDMA_CM_EVENT_INTERNAL as c_int + 1,
            c_int::MAX,
        ];
        for code in others {
            assert_eq!(EventKind::from_code(code), EventKind::Other);
        }
        assert_eq!(EventKind::Other.name(), "OTHER");
    }
}
