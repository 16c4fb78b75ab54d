// SPDX-License-Identifier: GPL-2.0

//! A counted reference on a network namespace, where a CM id lives, and the
//! addresses parsed in it.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h)

use super::ffi;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::str::CString;

/// A reference on a network namespace.
///
/// # Invariants
///
/// `self.0` points to a `struct net` on which this value holds one reference.
pub(crate) struct NetNs(NonNull<ffi::Net>);

// SAFETY: A reference on a `struct net` may be used and dropped from any thread.
unsafe impl Send for NetNs {}
// SAFETY: `NetNs` only allows reading through a shared reference.
unsafe impl Sync for NetNs {}

impl NetNs {
    /// Takes a reference on the network namespace of the calling task.
    pub(crate) fn current() -> Result<Self> {
        // SAFETY: In process context `current` has an nsproxy with a network namespace.
        let net = unsafe { ffi::cmecho_net_get_current() };
        // INVARIANT: `get_net()` returned the namespace with a reference taken.
        Ok(Self(NonNull::new(net).ok_or(EINVAL)?))
    }

    /// The namespace's inode number, as `ip netns identify` and `/proc/*/ns/net` show it.
    pub(crate) fn inum(&self) -> u32 {
        // SAFETY: By the type invariant `self.0` is a valid `struct net`.
        unsafe { ffi::cmecho_net_inum(self.0.as_ptr()) }
    }

    /// Whether `addr` is exactly one IPv4 or IPv6 address, nothing after it, with
    /// an optional `%scope` naming an interface of this namespace.
    ///
    /// `in4_pton()` stops at a colon or a newline, so an IPv4 address is also
    /// checked to be nothing but digits and dots (`10.0.0.1:80` is not one).
    pub(crate) fn valid_addr(&self, addr: &CStr) -> bool {
        match self.sockaddr(addr, 0) {
            Ok(sa) if sa.is_ipv4() => addr
                .to_bytes()
                .iter()
                .all(|c| c.is_ascii_digit() || *c == b'.'),
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// `addr` (IPv4 or IPv6, with an optional `%scope` naming an interface of this
    /// namespace) and `port`, as the CM takes an address (`inet_pton_with_scope`).
    pub(super) fn sockaddr(&self, addr: &CStr, port: u16) -> Result<SockAddr> {
        let port = CString::try_from_fmt(fmt!("{port}"))?;
        let mut ss: ffi::__kernel_sockaddr_storage = Zeroable::zeroed();
        // SAFETY: By the type invariant `self.0` is a valid `struct net`; `addr` and
        // `port` are NUL-terminated strings the function only reads; `ss` is
        // writable storage of the type it fills.
        to_result(unsafe {
            ffi::inet_pton_with_scope(
                self.0.as_ptr(),
                bindings::AF_UNSPEC as u16,
                addr.as_char_ptr(),
                port.as_char_ptr(),
                &mut ss,
            )
        })?;
        Ok(SockAddr(ss))
    }

    pub(super) fn as_ptr(&self) -> *mut ffi::Net {
        self.0.as_ptr()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this value owns one reference.
        unsafe { ffi::cmecho_net_put(self.0.as_ptr()) };
    }
}

/// An IPv4 or IPv6 address and port, as `struct sockaddr_storage`.
pub(super) struct SockAddr(ffi::__kernel_sockaddr_storage);

impl SockAddr {
    fn is_ipv4(&self) -> bool {
        // SAFETY: Both members of the union are plain data, and every bit pattern
        // is a valid family number.
        let family = unsafe { self.0.__bindgen_anon_1.__bindgen_anon_1.ss_family };
        u32::from(family) == bindings::AF_INET
    }

    /// The address as the CM's functions take it (`struct sockaddr *`), which
    /// they only read.
    pub(super) fn as_ptr(&self) -> *mut ffi::Sockaddr {
        core::ptr::from_ref(&self.0).cast_mut().cast()
    }
}
