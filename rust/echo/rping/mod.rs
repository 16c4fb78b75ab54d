// SPDX-License-Identifier: GPL-2.0

//! The rping wire format: one 16-byte big-endian message, and the ping payload.
//!
//! ```text
//! offset 0  __be64 buf    remote virtual address of a buffer
//! offset 8  __be32 rkey   remote key of that buffer's registration
//! offset 12 __be32 size   length in bytes
//! ```
//!
//! Every message is untrusted input: [`Msg::parse`] rejects any other length, and
//! [`Msg::checked_size`] a size that is zero or larger than the local buffer.
//!
//! The mode's two sides: [`client`] and [`server`].

pub(super) mod client;
pub(super) mod server;

use super::config::{Config, Role};
use super::mode::{self, ModeOps};
use kernel::prelude::*;

/// The rping mode, as the service sees it.
pub(super) const OPS: ModeOps = ModeOps {
    name: "rping",
    conn_buf_bytes,
    listen: mode::listen::<server::Server>,
    start: client::start,
};

/// The source and sink buffers and three messages (client); one buffer of the
/// largest size and two messages (server).
fn conn_buf_bytes(cfg: &Config) -> u64 {
    let msg = u64::from(MSG_LEN);
    match cfg.role {
        Role::Client => 2 * u64::from(cfg.size) + 3 * msg,
        Role::Server => u64::from(MAX_SIZE) + 2 * msg,
    }
}

/// The length of every rping message.
pub(crate) const MSG_LEN: u32 = 16;

/// The TCP port space port rping uses by default.
pub(crate) const DEFAULT_PORT: u16 = 7174;

/// The largest payload cmecho exchanges (rping's own limit is 64 KiB).
pub(crate) const MAX_SIZE: u32 = super::limits::SIZE.hi as u32;

/// One rping message: a buffer the peer may access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Msg {
    /// The buffer's address in the sender's registration.
    pub(crate) addr: u64,
    /// The registration's remote key.
    pub(crate) rkey: u32,
    /// The buffer's length.
    pub(crate) size: u32,
}

impl Msg {
    /// Encodes the message.
    pub(crate) fn encode(&self, out: &mut [u8]) -> Result {
        let out = out.get_mut(..MSG_LEN as usize).ok_or(EINVAL)?;
        out[0..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..16].copy_from_slice(&self.size.to_be_bytes());
        Ok(())
    }

    /// Decodes a received message of `len` bytes; `EPROTO` unless `len` is 16.
    pub(crate) fn parse(buf: &[u8], len: u32) -> Result<Self> {
        if len != MSG_LEN {
            return Err(EPROTO);
        }
        let b = buf.get(..MSG_LEN as usize).ok_or(EPROTO)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[0..8]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[8..12]);
        let mut s = [0u8; 4];
        s.copy_from_slice(&b[12..16]);
        Ok(Self {
            addr: u64::from_be_bytes(a),
            rkey: u32::from_be_bytes(k),
            size: u32::from_be_bytes(s),
        })
    }

    /// The advertised size, if it is usable with a local buffer of `max` bytes:
    /// `EMSGSIZE` for zero or more than `max`.
    pub(crate) fn checked_size(&self, max: u32) -> Result<u32> {
        if self.size == 0 || self.size > max {
            return Err(EMSGSIZE);
        }
        Ok(self.size)
    }
}

/// Writes bytes `at..at + out.len()` of the payload of ping `n`, `total` bytes
/// long, into `out`: the prefix, then letters cycling from `'A'` to `'z'`
/// starting at `'A' + n % 58`, and a NUL as the last byte.
pub(crate) fn fill_payload_at(out: &mut [u8], at: usize, total: usize, n: u64) {
    let mut prefix = [0u8; 32];
    let plen = format_prefix(&mut prefix, n);
    let first = (n % 58) as usize;
    for (j, b) in out.iter_mut().enumerate() {
        let i = at + j;
        *b = if i + 1 == total {
            0
        } else if i < plen {
            prefix[i]
        } else {
            b'A' + ((first + (i - plen)) % 58) as u8
        };
    }
}

/// Writes `"rdma-ping-<n>: "` into `out`, returns its length.
fn format_prefix(out: &mut [u8; 32], n: u64) -> usize {
    const HEAD: &[u8] = b"rdma-ping-";
    out[..HEAD.len()].copy_from_slice(HEAD);
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut v = n;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut p = HEAD.len();
    while d > 0 {
        d -= 1;
        out[p] = digits[d];
        p += 1;
    }
    out[p] = b':';
    out[p + 1] = b' ';
    p + 2
}

#[kunit_tests(cmecho_rping)]
mod tests {
    use super::*;

    /// Fills `buf` with the payload of ping `n` as rping does: `"rdma-ping-<n>: "`,
    /// then an ASCII ramp from `A`..`z` starting at a character that advances with
    /// `n`, and a NUL in the last byte.
    fn fill_payload(buf: &mut [u8], n: u64) {
        fill_payload_at(buf, 0, buf.len(), n);
    }

    #[test]
    fn msg_roundtrip() {
        let m = Msg {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 4096,
        };
        let mut b = [0u8; 16];
        assert_eq!(m.encode(&mut b), Ok(()));
        assert_eq!(b[0], 0x01);
        assert_eq!(b[8], 0x11);
        assert_eq!(b[15], 0x00);
        assert_eq!(b[14], 0x10);
        assert_eq!(Msg::parse(&b, 16), Ok(m));
    }

    #[test]
    fn msg_untrusted() {
        let b = [0u8; 16];
        assert_eq!(Msg::parse(&b, 15), Err(EPROTO));
        assert_eq!(Msg::parse(&b, 17), Err(EPROTO));
        let m = Msg {
            addr: 0,
            rkey: 0,
            size: 0,
        };
        assert_eq!(m.checked_size(64), Err(EMSGSIZE));
        let m = Msg {
            addr: 0,
            rkey: 0,
            size: 65,
        };
        assert_eq!(m.checked_size(64), Err(EMSGSIZE));
        assert_eq!(m.checked_size(65), Ok(65));
    }

    #[test]
    fn payload() {
        let mut b = [0u8; 20];
        fill_payload(&mut b, 7);
        assert_eq!(&b[..13], b"rdma-ping-7: ");
        assert_eq!(b[13], b'A' + 7);
        assert_eq!(b[19], 0);
    }

    #[test]
    fn payload_in_chunks() {
        let mut whole = [0u8; 300];
        fill_payload(&mut whole, 123);
        let mut parts = [0u8; 300];
        for (c, part) in parts.chunks_mut(41).enumerate() {
            fill_payload_at(part, c * 41, 300, 123);
        }
        assert!(whole == parts);
        assert_eq!(whole[299], 0);
    }
}
