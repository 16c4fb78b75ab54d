// SPDX-License-Identifier: GPL-2.0

//! CM events, decoded from `struct rdma_cm_event` into plain values.
//!
//! The C side maps `enum rdma_cm_event_type` to the few kinds the layer tells
//! apart (`enum cmecho_ev`); everything an event carries that the layer uses is
//! copied out here, so no pointer into the event outlives its handler.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::ffi;
use super::params::Ece;
use kernel::ffi::c_int;

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
}

/// The CM events cmecho distinguishes (`enum rdma_cm_event_type`, mapped in C).
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
    /// Any other event (multicast, address change, connect response).
    Other,
}

impl EventKind {
    fn from_code(code: c_int) -> Self {
        match code {
            ffi::CMECHO_EV_ADDR_RESOLVED => Self::AddrResolved,
            ffi::CMECHO_EV_ADDR_ERROR => Self::AddrError,
            ffi::CMECHO_EV_ROUTE_RESOLVED => Self::RouteResolved,
            ffi::CMECHO_EV_ROUTE_ERROR => Self::RouteError,
            ffi::CMECHO_EV_CONNECT_REQUEST => Self::ConnectRequest,
            ffi::CMECHO_EV_CONNECT_ERROR => Self::ConnectError,
            ffi::CMECHO_EV_UNREACHABLE => Self::Unreachable,
            ffi::CMECHO_EV_REJECTED => Self::Rejected,
            ffi::CMECHO_EV_ESTABLISHED => Self::Established,
            ffi::CMECHO_EV_DISCONNECTED => Self::Disconnected,
            ffi::CMECHO_EV_DEVICE_REMOVAL => Self::DeviceRemoval,
            ffi::CMECHO_EV_TIMEWAIT_EXIT => Self::TimewaitExit,
            _ => Self::Other,
        }
    }

    /// The event's name, as the CM calls it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::AddrResolved => "ADDR_RESOLVED",
            Self::AddrError => "ADDR_ERROR",
            Self::RouteResolved => "ROUTE_RESOLVED",
            Self::RouteError => "ROUTE_ERROR",
            Self::ConnectRequest => "CONNECT_REQUEST",
            Self::ConnectError => "CONNECT_ERROR",
            Self::Unreachable => "UNREACHABLE",
            Self::Rejected => "REJECTED",
            Self::Established => "ESTABLISHED",
            Self::Disconnected => "DISCONNECTED",
            Self::DeviceRemoval => "DEVICE_REMOVAL",
            Self::TimewaitExit => "TIMEWAIT_EXIT",
            Self::Other => "OTHER",
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
        // SAFETY: The caller guarantees `ev` is valid; the helpers only read it.
        unsafe {
            Self {
                kind: EventKind::from_code(ffi::cmecho_ev_type(ev)),
                status: ffi::cmecho_ev_status(ev),
                ece: Ece {
                    vendor_id: ffi::cmecho_ev_ece_vendor_id(ev),
                    attr_mod: ffi::cmecho_ev_ece_attr_mod(ev),
                },
                initiator_depth: ffi::cmecho_ev_initiator_depth(ev),
                responder_resources: ffi::cmecho_ev_responder_resources(ev),
            }
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
                ffi::CMECHO_EV_ADDR_RESOLVED,
                EventKind::AddrResolved,
                "ADDR_RESOLVED",
            ),
            (
                ffi::CMECHO_EV_ADDR_ERROR,
                EventKind::AddrError,
                "ADDR_ERROR",
            ),
            (
                ffi::CMECHO_EV_ROUTE_RESOLVED,
                EventKind::RouteResolved,
                "ROUTE_RESOLVED",
            ),
            (
                ffi::CMECHO_EV_ROUTE_ERROR,
                EventKind::RouteError,
                "ROUTE_ERROR",
            ),
            (
                ffi::CMECHO_EV_CONNECT_REQUEST,
                EventKind::ConnectRequest,
                "CONNECT_REQUEST",
            ),
            (
                ffi::CMECHO_EV_CONNECT_ERROR,
                EventKind::ConnectError,
                "CONNECT_ERROR",
            ),
            (
                ffi::CMECHO_EV_UNREACHABLE,
                EventKind::Unreachable,
                "UNREACHABLE",
            ),
            (ffi::CMECHO_EV_REJECTED, EventKind::Rejected, "REJECTED"),
            (
                ffi::CMECHO_EV_ESTABLISHED,
                EventKind::Established,
                "ESTABLISHED",
            ),
            (
                ffi::CMECHO_EV_DISCONNECTED,
                EventKind::Disconnected,
                "DISCONNECTED",
            ),
            (
                ffi::CMECHO_EV_DEVICE_REMOVAL,
                EventKind::DeviceRemoval,
                "DEVICE_REMOVAL",
            ),
            (
                ffi::CMECHO_EV_TIMEWAIT_EXIT,
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
        for code in [0, -1, 13, c_int::MAX] {
            assert_eq!(EventKind::from_code(code), EventKind::Other);
        }
        assert_eq!(EventKind::Other.name(), "OTHER");
    }
}
