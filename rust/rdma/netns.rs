// SPDX-License-Identifier: GPL-2.0

//! A counted reference on a network namespace, where a CM id lives, and the
//! addresses parsed in it.
//!
//! C headers: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h),
//! [`include/linux/inet.h`](srctree/include/linux/inet.h)

use super::ffi;
use core::fmt::Write;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::str::NullTerminatedFormatter;

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
    /// an optional `%scope` as `inet_pton_with_scope()` takes it: an interface of
    /// this namespace by name or number, ignored on an address that is not
    /// link-local.
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

    /// `addr` (IPv4 or IPv6, with an optional `%scope`, see
    /// [`NetNs::valid_addr`]) and `port`, as the CM takes an address
    /// (`inet_pton_with_scope`).
    pub(super) fn sockaddr(&self, addr: &CStr, port: u16) -> Result<SockAddr> {
        let port = PortStr::new(port);
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
        // SAFETY: The storage was zeroed and then filled by `inet_pton_with_scope`,
        // so every byte of the union is initialised; its members are plain data.
        let family = unsafe { self.0.__bindgen_anon_1.__bindgen_anon_1.ss_family };
        u32::from(family) == bindings::AF_INET
    }

    /// The address as the CM's functions take it (`struct sockaddr *`). They only
    /// read it; `rdma_bind_addr` declares it writable.
    pub(super) fn as_ptr(&self) -> *const ffi::Sockaddr {
        core::ptr::from_ref(&self.0).cast()
    }
}

/// A port number as decimal text, NUL-terminated, without allocating.
struct PortStr([u8; 6]);

impl PortStr {
    fn new(port: u16) -> Self {
        let mut s = [0u8; 6];
        // Five digits and the NUL fit every `u16`, so the write cannot fail.
        if let Some(mut f) = NullTerminatedFormatter::new(&mut s) {
            let _ = write!(f, "{port}");
        }
        Self(s)
    }

    fn as_char_ptr(&self) -> *const kernel::ffi::c_char {
        self.0.as_ptr().cast()
    }
}

#[kernel::prelude::kunit_tests(cmecho_netns)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_decimal_text() {
        for (port, text) in [
            (0u16, &b"0\0\0\0\0\0"[..]),
            (7, b"7\0\0\0\0\0"),
            (10, b"10\0\0\0\0"),
            (7174, b"7174\0\0"),
            (65535, b"65535\0"),
        ] {
            assert_eq!(&PortStr::new(port).0[..], text);
        }
    }
}
