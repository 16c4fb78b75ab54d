// SPDX-License-Identifier: GPL-2.0

//! The text of an endpoint's `last_error`, held in the endpoint itself.
//!
//! Recording an error allocates nothing, so an error that happens for want of
//! memory (a connection failing while every allocation fails) is still named.
//! A message longer than [`ErrorText::CAP`] bytes keeps its first `CAP` bytes,
//! cut at a character boundary.

use core::fmt;
use kernel::prelude::*;

/// `last_error`: empty for "none".
///
/// # Invariants
///
/// `buf[..len]` is valid UTF-8 and `len <= CAP`.
pub(super) struct ErrorText {
    buf: [u8; ErrorText::CAP],
    len: usize,
}

impl ErrorText {
    /// The longest text kept, in bytes.
    pub(super) const CAP: usize = 512;

    /// No error.
    pub(super) const fn new() -> Self {
        // INVARIANT: An empty text is valid UTF-8.
        Self {
            buf: [0; Self::CAP],
            len: 0,
        }
    }

    /// Forgets the error.
    pub(super) fn clear(&mut self) {
        // INVARIANT: As in `new`.
        self.len = 0;
    }

    /// Replaces the text with `msg`, as much of it as fits.
    pub(super) fn set(&mut self, msg: fmt::Arguments<'_>) {
        self.clear();
        // An error only says the text was cut: what fits is kept.
        let _ = fmt::write(self, msg);
    }

    /// The text, or `None` for no error.
    pub(super) fn get(&self) -> Option<&str> {
        let s = self.buf.get(..self.len)?;
        if s.is_empty() {
            return None;
        }
        core::str::from_utf8(s).ok()
    }
}

impl fmt::Write for ErrorText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = Self::CAP - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        if let (Some(dst), Some(src)) = (self.buf.get_mut(self.len..self.len + n), s.get(..n)) {
            dst.copy_from_slice(src.as_bytes());
            // INVARIANT: `src` is whole characters of a `str`, appended to
            // valid UTF-8, and `len + n <= CAP` (`n <= room`).
            self.len += n;
        }
        // Cut: the formatting stops here, so nothing later is appended after
        // the cut (a short piece that would still fit).
        if n < s.len() {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

#[kunit_tests(cmecho_error_text)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_none_and_set_replaces() {
        let mut t = ErrorText::new();
        assert_eq!(t.get(), None);
        t.set(fmt!("client {}: {}", 3, "SEND failed"));
        assert_eq!(t.get(), Some("client 3: SEND failed"));
        t.set(fmt!("enable: {}", "addr is not set"));
        assert_eq!(t.get(), Some("enable: addr is not set"));
        t.clear();
        assert_eq!(t.get(), None);
    }

    #[test]
    fn long_text_cut_at_a_character_boundary() {
        let mut t = ErrorText::new();
        // 511 ASCII bytes, then a 2-byte character that does not fit whole.
        let a = [b'a'; ErrorText::CAP - 1];
        let a = core::str::from_utf8(&a).unwrap();
        t.set(fmt!("{}{}tail", a, '\u{e9}'));
        assert_eq!(t.get(), Some(a));
        // Exactly CAP bytes fit; nothing after a cut is appended.
        t.set(fmt!("{}b", a));
        assert_eq!(t.get().map(str::len), Some(ErrorText::CAP));
        t.set(fmt!("{}bc{}", a, 'd'));
        assert_eq!(t.get().map(str::len), Some(ErrorText::CAP));
        assert_eq!(t.get().and_then(|s| s.strip_prefix(a)), Some("b"));
    }
}
