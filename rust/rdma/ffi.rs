// SPDX-License-Identifier: GPL-2.0

//! Declarations of cmecho's own C helpers (`rust/helpers/*.c`).
//!
//! Only functions of this module's C files are declared here, each matching its
//! prototype in `rust/helpers/cmecho_helpers.h`. Foreign structs never get a Rust
//! layout: they are opaque types, only ever behind pointers.

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_void};

/// Declares zero-sized opaque types for C structs only handled by pointer.
macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$m])*
            #[repr(C)]
            pub(crate) struct $name {
                _private: [u8; 0],
                _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
            }
        )*
    };
}

opaque! {
    /// `struct net`.
    Net,
    /// `struct rdma_cm_id`.
    RdmaCmId,
    /// `struct rdma_cm_event`.
    RdmaCmEvent,
    /// `struct cmecho_res` of `rust/helpers/verbs.c`.
    Res,
}

// `enum cmecho_ev` of `cmecho_helpers.h`.
pub(crate) const CMECHO_EV_ADDR_RESOLVED: c_int = 1;
pub(crate) const CMECHO_EV_ADDR_ERROR: c_int = 2;
pub(crate) const CMECHO_EV_ROUTE_RESOLVED: c_int = 3;
pub(crate) const CMECHO_EV_ROUTE_ERROR: c_int = 4;
pub(crate) const CMECHO_EV_CONNECT_REQUEST: c_int = 5;
pub(crate) const CMECHO_EV_CONNECT_ERROR: c_int = 6;
pub(crate) const CMECHO_EV_UNREACHABLE: c_int = 7;
pub(crate) const CMECHO_EV_REJECTED: c_int = 8;
pub(crate) const CMECHO_EV_ESTABLISHED: c_int = 9;
pub(crate) const CMECHO_EV_DISCONNECTED: c_int = 10;
pub(crate) const CMECHO_EV_DEVICE_REMOVAL: c_int = 11;
pub(crate) const CMECHO_EV_TIMEWAIT_EXIT: c_int = 12;

// `enum cmecho_rej` of `cmecho_helpers.h`.
pub(crate) const CMECHO_REJ_CONSUMER: u8 = 0;
pub(crate) const CMECHO_REJ_VENDOR_OPTION: u8 = 1;

/// `cmecho_completion_fn`: a work completion (context, tag, `ib_wc_status`, byte length).
pub(crate) type CompletionFn = unsafe extern "C" fn(*mut c_void, u32, c_int, u32);

extern "C" {
    pub(crate) fn cmecho_probe_cm_id(ack_timeout: u8) -> c_int;
    pub(crate) fn cmecho_wq_init() -> c_int;
    pub(crate) fn cmecho_wq_exit();
    pub(crate) fn cmecho_wq_get() -> *mut bindings::workqueue_struct;

    pub(crate) fn cmecho_net_get_current() -> *mut Net;
    pub(crate) fn cmecho_net_put(net: *mut Net);
    pub(crate) fn cmecho_net_inum(net: *const Net) -> u32;

    pub(crate) fn cmecho_cm_create_id(net: *mut Net, ctx: *mut c_void) -> *mut RdmaCmId;
    pub(crate) fn cmecho_cm_set_context(id: *mut RdmaCmId, ctx: *mut c_void);
    pub(crate) fn cmecho_cm_destroy_id(id: *mut RdmaCmId);
    pub(crate) fn cmecho_parse_addr(net: *mut Net, addr: *const c_char) -> c_int;
    pub(crate) fn cmecho_cm_resolve_addr(
        id: *mut RdmaCmId,
        net: *mut Net,
        addr: *const c_char,
        port: u16,
        timeout_ms: c_int,
    ) -> c_int;
    pub(crate) fn cmecho_cm_listen(
        id: *mut RdmaCmId,
        net: *mut Net,
        addr: *const c_char,
        port: u16,
        backlog: c_int,
    ) -> c_int;
    pub(crate) fn cmecho_cm_resolve_route(id: *mut RdmaCmId, timeout_ms: c_int) -> c_int;
    pub(crate) fn cmecho_cm_set_ack_timeout(id: *mut RdmaCmId, timeout: u8) -> c_int;
    pub(crate) fn cmecho_cm_set_min_rnr_timer(id: *mut RdmaCmId, timer: u8) -> c_int;
    pub(crate) fn cmecho_cm_set_tos(id: *mut RdmaCmId, tos: u8);
    pub(crate) fn cmecho_cm_connect(
        id: *mut RdmaCmId,
        resp_res: u8,
        init_depth: u8,
        retry: u8,
        rnr_retry: u8,
        ece_vendor_id: u32,
        ece_attr_mod: u32,
    ) -> c_int;
    pub(crate) fn cmecho_cm_accept(
        id: *mut RdmaCmId,
        resp_res: u8,
        init_depth: u8,
        rnr_retry: u8,
        ece_vendor_id: u32,
        ece_attr_mod: u32,
    ) -> c_int;
    pub(crate) fn cmecho_cm_reject(id: *mut RdmaCmId, reason: u8) -> c_int;
    pub(crate) fn cmecho_cm_disconnect(id: *mut RdmaCmId) -> c_int;
    pub(crate) fn cmecho_ev_type(ev: *const RdmaCmEvent) -> c_int;
    pub(crate) fn cmecho_ev_status(ev: *const RdmaCmEvent) -> c_int;
    pub(crate) fn cmecho_ev_ece_vendor_id(ev: *const RdmaCmEvent) -> u32;
    pub(crate) fn cmecho_ev_ece_attr_mod(ev: *const RdmaCmEvent) -> u32;
    pub(crate) fn cmecho_ev_initiator_depth(ev: *const RdmaCmEvent) -> u8;
    pub(crate) fn cmecho_ev_responder_resources(ev: *const RdmaCmEvent) -> u8;
    pub(crate) fn cmecho_reject_msg(id: *mut RdmaCmId, status: c_int) -> *const c_char;
    pub(crate) fn cmecho_cm_peer_addr(id: *mut RdmaCmId, buf: *mut c_char, len: c_int) -> c_int;
    pub(crate) fn cmecho_cm_route_plt(id: *mut RdmaCmId) -> c_int;
    pub(crate) fn cmecho_cm_route_tclass(id: *mut RdmaCmId) -> c_int;
    pub(crate) fn cmecho_res_query_qp(
        res: *mut Res,
        qp_num: *mut u32,
        state: *mut u8,
        timeout: *mut u8,
        retry_cnt: *mut u8,
        rnr_retry: *mut u8,
        min_rnr_timer: *mut u8,
        path_mtu: *mut u32,
    ) -> c_int;

    pub(crate) fn cmecho_res_create(
        id: *mut RdmaCmId,
        done: CompletionFn,
        ctx: *mut c_void,
        ntags: u32,
        nbufs: u32,
        max_send_wr: u32,
        max_recv_wr: u32,
    ) -> *mut Res;
    pub(crate) fn cmecho_res_destroy(res: *mut Res);
    pub(crate) fn cmecho_res_ctx(res: *mut Res) -> *mut c_void;
    pub(crate) fn cmecho_wc_is_flush(status: c_int) -> bool;
    pub(crate) fn cmecho_wc_status_str(status: c_int) -> *const c_char;
    pub(crate) fn cmecho_qp_state_str(state: u8) -> *const c_char;
    pub(crate) fn cmecho_res_buf_alloc(res: *mut Res, idx: u32, len: u32, remote: bool) -> c_int;
    pub(crate) fn cmecho_res_buf_cpu(res: *mut Res, idx: u32, len: *mut u32) -> *mut u8;
    pub(crate) fn cmecho_res_buf_sync(res: *mut Res, idx: u32, for_cpu: bool);
    pub(crate) fn cmecho_res_buf_reg(
        res: *mut Res,
        idx: u32,
        remote_write: bool,
        rkey: *mut u32,
        addr: *mut u64,
    ) -> c_int;
    pub(crate) fn cmecho_post_recv(res: *mut Res, tag: u32, idx: u32, off: u32, len: u32) -> c_int;
    pub(crate) fn cmecho_post_send(res: *mut Res, tag: u32, idx: u32, off: u32, len: u32) -> c_int;
    pub(crate) fn cmecho_post_rdma(
        res: *mut Res,
        tag: u32,
        write: bool,
        idx: u32,
        off: u32,
        len: u32,
        raddr: u64,
        rkey: u32,
    ) -> c_int;
}
