// SPDX-License-Identifier: GPL-2.0

//! Native echo mode: SEND/RECV echo with up to `depth` messages in flight.
//!
//! The client SENDs messages of `size` bytes whose content is a function of their
//! sequence number ([`fill_at`]); the server SENDs each message back from the buffer
//! it arrived in. RC delivers in order, so the client checks every echo against
//! the oldest sequence number it has in flight ([`verify_at`]): a wrong length, a
//! wrong sequence number or changed content is a verify error, counted and
//! reported in `last_error`, never ignored. Everything runs in completion
//! handlers: no thread per connection.
//!
//! The server's `depth` and `size` are the most it accepts: it keeps `2 × depth`
//! receives of `size` bytes posted per connection (half may be busy echoing).
//! The client states its own in its connect request, and a server that accepts
//! less rejects it with its limits, which the client shows ([`super::hello`]).

//!
//! The mode's two sides: [`client`] and [`server`].

pub(super) mod client;
pub(super) mod server;

use super::config::Config;
use super::mode::{self, ModeOps};

/// The native echo mode, as the service sees it.
pub(super) const OPS: ModeOps = ModeOps {
    name: "echo",
    conn_buf_bytes,
    listen: mode::listen::<server::Server>,
    start: client::start,
};

/// `depth` send and `depth` receive buffers (client), or `2 × depth`
/// receive buffers echoed in place (server).
fn conn_buf_bytes(cfg: &Config) -> u64 {
    2 * u64::from(cfg.depth) * u64::from(cfg.size)
}

/// The most messages in flight per connection.
pub(crate) const MAX_DEPTH: u32 = super::limits::DEPTH.hi as u32;

/// Writes bytes `at..at + out.len()` of message `seq` of `total` bytes into `out`:
/// the message is its sequence number (little-endian, as much of it as fits)
/// followed by 8-byte words derived from it and their index ([`pattern`]), so a
/// chunk costs a multiplication per word, not per byte. A message shorter than
/// 8 bytes folds the rest of the sequence number into its last byte.
pub(crate) fn fill_at(out: &mut [u8], at: usize, total: usize, seq: u64) {
    let mut i = at;
    let mut rest = &mut *out;
    while !rest.is_empty() {
        let (w, o) = (i / 8, i % 8);
        let word = if w == 0 {
            seq.to_le_bytes()
        } else {
            pattern(seq, w).to_le_bytes()
        };
        let n = (8 - o).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&word[o..o + n]);
        i += n;
        rest = tail;
    }
    // A message shorter than the sequence number still depends on all of it:
    // its last byte also carries the bytes that did not fit.
    if total < 8 && total > at && total <= at + out.len() {
        let folded = seq.to_le_bytes()[total..].iter().fold(0u8, |a, b| a ^ b);
        out[total - 1 - at] ^= folded.rotate_left(1) ^ 0x5a;
    }
}

/// Whether `part` is bytes `at..at + part.len()` of message `seq` of `total` bytes.
pub(crate) fn verify_at(part: &[u8], at: usize, total: usize, seq: u64) -> bool {
    let mut expect = [0u8; 64];
    part.chunks(expect.len()).enumerate().all(|(c, chunk)| {
        let e = &mut expect[..chunk.len()];
        fill_at(e, at + c * 64, total, seq);
        chunk == &*e
    })
}

/// Word `w` (`w >= 1`) of message `seq`: both multiplications are bijections,
/// so two messages differ in every word, and two words of one message differ.
fn pattern(seq: u64, w: usize) -> u64 {
    seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64).wrapping_mul(0xff51_afd7_ed55_8ccd)
}

#[kernel::prelude::kunit_tests(cmecho_native)]
mod tests {
    use super::*;

    /// Writes the whole of message `seq` into `buf`.
    fn fill(buf: &mut [u8], seq: u64) {
        fill_at(buf, 0, buf.len(), seq);
    }

    /// Whether `buf` is exactly message `seq`.
    fn verify(buf: &[u8], seq: u64) -> bool {
        verify_at(buf, 0, buf.len(), seq)
    }

    #[test]
    fn fill_verify_roundtrip() {
        for size in [1usize, 7, 8, 9, 64, 65, 200] {
            let mut b = [0u8; 200];
            fill(&mut b[..size], 12345);
            assert!(verify(&b[..size], 12345));
            assert!(!verify(&b[..size], 12346));
        }
    }

    #[test]
    fn chunks_match_whole() {
        // At most 512 bytes each: two buffers on the test's stack frame.
        for total in [1usize, 7, 8, 9, 300, 512] {
            let mut whole = [0u8; 512];
            fill(&mut whole[..total], 99);
            let mut parts = [0u8; 512];
            let mut at = 0;
            while at < total {
                let n = 37.min(total - at);
                fill_at(&mut parts[at..at + n], at, total, 99);
                assert!(verify_at(&whole[at..at + n], at, total, 99));
                at += n;
            }
            assert!(whole[..total] == parts[..total]);
        }
    }

    #[test]
    fn verify_catches_changes() {
        let mut b = [0u8; 100];
        fill(&mut b, 7);
        b[80] ^= 1;
        assert!(!verify(&b, 7));
        let mut one = [0u8; 1];
        fill(&mut one, 3);
        let mut other = [0u8; 1];
        fill(&mut other, 4);
        assert!(one != other);
        // Short messages depend on the bytes of the sequence number that do not fit.
        let (mut a, mut b) = ([0u8; 3], [0u8; 3]);
        fill(&mut a, 0x0100_0000);
        fill(&mut b, 0x0200_0000);
        assert!(a != b);
        // A message and the same words moved by one are different messages.
        let mut w = [0u8; 64];
        fill(&mut w, 5);
        let mut shifted = [0u8; 64];
        shifted[8..].copy_from_slice(&w[..56]);
        shifted[..8].copy_from_slice(&w[..8]);
        assert!(!verify(&shifted, 5));
    }
}
