// SPDX-License-Identifier: GPL-2.0

//! Declarations of cmecho's own C helpers (`rust/helpers/*.c`) and of the parts of
//! the kernel's RDMA API (and address parsing) the layer calls directly.
//!
//! None is written by hand: the build runs bindgen over the helpers' header, the
//! kernel's RDMA headers and `<linux/inet.h>` (`rust/helpers/cmecho_bindgen.h`)
//! into `rust/rdma/ffi_generated.rs` (`Kbuild`, which names every kernel item taken),
//! and this module includes and re-exports the result. A prototype, an enum value
//! or a struct that changes in a header thus changes here too, and a caller that
//! no longer fits fails to compile. Items keep their C names and types: `u8` is
//! `u8`, `int` is `c_int`, and a C function pointer is an `Option` of a function,
//! as it may be null.
//!
//! Foreign structs the layer only points to get no Rust layout: the generated
//! declarations use the opaque types below for them (and `bindings::atomic_t`
//! and `bindings::workqueue_struct`). The structs it reads or builds
//! (`rdma_cm_event`, `rdma_cm_id`, `ib_wc`, `ib_pd`, `ib_qp_attr`, the work
//! requests) are laid out in full, but for the members nothing reads that would
//! take in many more kernel types (an id's route, a PD's restrack entry, address
//! handles): bindgen gives those their size and alignment and no fields
//! (`--opaque-type` in `Kbuild`).
//!
//! One thing stays by hand, and the build checks it: the enum constants are
//! re-typed for their users (the build fails if a value does not fit). The
//! functions Rust implements for the C side, `cmecho_rs_cm_event` and
//! `cmecho_rs_debugfs_show`, are declared here too: `id.rs` and `debugfs.rs`
//! check that their definitions have the declared types.

use kernel::ffi::c_int;

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
    /// `struct dentry`.
    Dentry,
    /// `struct seq_file`.
    SeqFile,
    /// `struct ib_cq`.
    IbCq,
    /// `struct ib_qp`.
    IbQp,
    /// `struct ib_device`.
    IbDevice,
    /// `struct ib_mr`.
    IbMr,
    /// `struct ib_event`.
    IbEvent,
    /// `struct ib_udata`, which the layer passes as null (kernel objects).
    IbUdata,
    /// `struct ib_uobject`.
    IbUobject,
    /// `struct net_device`.
    NetDevice,
    /// `struct ib_srq`.
    IbSrq,
    /// `struct ib_xrcd`.
    IbXrcd,
    /// `struct ib_rwq_ind_table`.
    IbRwqIndTable,
    /// `struct sockaddr`, of which the layer only passes a
    /// `struct sockaddr_storage` as the CM takes it.
    Sockaddr,
}

/// What bindgen makes of `rust/helpers/cmecho_helpers.h`, with the opaque types
/// above for the structs the header only declares.
#[allow(
    dead_code,
    non_camel_case_types,
    unreachable_pub,
    reason = "bindgen's output: C names, `pub` items, values of the header no caller uses"
)]
#[allow(
    improper_ctypes,
    reason = "a `struct tracepoint` reaches, through its pointers, kernel structs \
              bindgen lays out empty (`dev_archdata`); Rust only takes its address"
)]
mod generated {
    use super::{
        Dentry as dentry, IbCq as ib_cq, IbDevice as ib_device, IbEvent as ib_event, IbMr as ib_mr,
        IbQp as ib_qp, IbRwqIndTable as ib_rwq_ind_table, IbSrq as ib_srq, IbUdata as ib_udata,
        IbUobject as ib_uobject, IbXrcd as ib_xrcd, Net as net, NetDevice as net_device,
        SeqFile as seq_file, Sockaddr as sockaddr,
    };
    use kernel::bindings::{atomic_t, workqueue_struct};
    // The type of the tracepoints `trace.c` defines, which the kernel declares
    // only with `CONFIG_TRACEPOINTS` (and bindgen with it).
    #[cfg(CONFIG_TRACEPOINTS)]
    use kernel::bindings::tracepoint;
    use kernel::ffi;
    use pin_init::MaybeZeroable;

    // `rust/rdma/ffi_generated.rs` of the build's output directory (`Kbuild`).
    include!(env!("CMECHO_FFI_GENERATED"));
}

pub(crate) use generated::*;

/// The structs the layer reads fields of, under the names its code uses for them.
pub(crate) use generated::{
    ib_pd as IbPd, ib_wc as IbWc, rdma_cm_event as RdmaCmEvent, rdma_cm_id as RdmaCmId,
};

/// Re-types constants of a C enum of the header, failing the build if a value does
/// not fit the new type.
macro_rules! enum_consts {
    ($ty:ty: $($name:ident),* $(,)?) => {
        $(
            pub(crate) const $name: $ty = {
                let v = generated::$name;
                assert!(v as i128 == v as $ty as i128, "enum value does not fit");
                v as $ty
            };
        )*
    };
}

// `enum rdma_cm_event_type`, compared with what `cmecho_ev_type` returns (an `int`):
// the codes `event.rs` tells apart.
enum_consts! { c_int:
    RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_ADDR_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED,
    RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST,
    RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_UNREACHABLE,
    RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_DISCONNECTED,
    RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_TIMEWAIT_EXIT,
}

// `enum ib_cm_rej_reason`, passed as the `u8` reason of `rdma_reject`: the reasons
// `listener.rs` gives.
enum_consts! { u8:
    IB_CM_REJ_CONSUMER_DEFINED,
    IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED,
}
