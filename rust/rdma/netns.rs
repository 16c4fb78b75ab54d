// SPDX-License-Identifier: GPL-2.0

//! A counted reference on a network namespace: where a CM id lives.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h)

use super::ffi;
use core::ptr::NonNull;
use kernel::prelude::*;

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
    pub(crate) fn valid_addr(&self, addr: &CStr) -> bool {
        // SAFETY: By the type invariant `self.0` is a valid `struct net`; `addr` is
        // a valid NUL-terminated string, which the helper only reads.
        unsafe { ffi::cmecho_parse_addr(self.0.as_ptr(), addr.as_char_ptr()) == 0 }
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
