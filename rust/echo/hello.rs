// SPDX-License-Identifier: GPL-2.0

//! The native echo's agreement at connect time: the client states its message
//! size and depth in its connect request's private data (a [`Hello`]); a
//! server that accepts less rejects the request with its own limits in the
//! reject's private data (a [`Refused`]), which the client shows. A mismatch
//! is then a reason at connect time, never a failed completion after it.
//!
//! Both messages are 16 bytes, big-endian, version 1:
//!
//! | Bytes | Hello (client to server) | Refused (server to client) |
//! |---|---|---|
//! | 0..4 | `CMEC` | `CMEC` |
//! | 4 | version: 1 | version: 1 (the server's) |
//! | 5 | kind: 1 | kind: 2 |
//! | 6 | 0 | what is refused: bit 0 size, 1 depth, 2 version, 3 unreadable |
//! | 7 | 0 | 0 |
//! | 8..12 | message size, 1..65536 | the server's most |
//! | 12..16 | depth, 1..256 | the server's most |
//!
//! Anything after byte 16 is ignored (the IB CM pads a request to 56 bytes). Each
//! side checks what it reads like any wire input: a request that is not a
//! version-1 hello with values in range is refused as unreadable (or as of
//! another version), and a reject that is not a consistent `Refused` explains
//! nothing.

use super::native::MAX_DEPTH;
use super::rping::MAX_SIZE;
use kernel::fmt;
use kernel::prelude::*;

/// The first bytes of both messages.
const MAGIC: [u8; 4] = *b"CMEC";
/// The version this module speaks.
const VERSION: u8 = 1;
const KIND_HELLO: u8 = 1;
const KIND_REFUSED: u8 = 2;
/// The length of both messages.
pub(super) const LEN: usize = 16;

/// Bits of [`Refused::what`].
const SIZE: u8 = 1 << 0;
const DEPTH: u8 = 1 << 1;
const OTHER_VERSION: u8 = 1 << 2;
const UNREADABLE: u8 = 1 << 3;

/// What a native echo client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hello {
    /// Message size in bytes.
    pub(super) size: u32,
    /// Messages in flight.
    pub(super) depth: u32,
}

/// A server's answer to a [`Hello`] it does not accept, and what the client
/// reads back of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// What is refused ([`SIZE`], [`DEPTH`], [`OTHER_VERSION`], [`UNREADABLE`]).
    what: u8,
    /// The client's request, where the server could read it.
    asked: Option<Hello>,
    /// The server's limits.
    limits: Hello,
}

fn header(kind: u8, what: u8, h: Hello) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    b[5] = kind;
    b[6] = what;
    b[8..12].copy_from_slice(&h.size.to_be_bytes());
    b[12..16].copy_from_slice(&h.depth.to_be_bytes());
    b
}

/// The `(version, kind, what, reserved, size, depth)` of a message, if it
/// starts with [`MAGIC`] and is long enough.
fn fields(b: &[u8]) -> Option<(u8, u8, u8, u8, u32, u32)> {
    let b: &[u8; LEN] = b.get(..LEN)?.try_into().ok()?;
    if b[..4] != MAGIC {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    Some((b[4], b[5], b[6], b[7], word(8), word(12)))
}

/// Whether a size and depth are what a native echo endpoint may use.
fn in_range(h: Hello) -> bool {
    (1..=MAX_SIZE).contains(&h.size) && (1..=MAX_DEPTH).contains(&h.depth)
}

impl Hello {
    /// The request's private data.
    pub(super) fn encode(self) -> [u8; LEN] {
        header(KIND_HELLO, 0, self)
    }

    /// Decides on the private data of a connect request for a server whose
    /// limits are `limits`: the client's hello if the server accepts it.
    pub(super) fn check(data: &[u8], limits: Hello) -> Result<Hello, Refused> {
        let refuse = |what, asked| Refused {
            what,
            asked,
            limits,
        };
        let (version, kind, what, reserved, size, depth) =
            fields(data).ok_or(refuse(UNREADABLE, None))?;
        if version != VERSION {
            return Err(refuse(OTHER_VERSION, None));
        }
        let h = Hello { size, depth };
        if kind != KIND_HELLO || what != 0 || reserved != 0 || !in_range(h) {
            return Err(refuse(UNREADABLE, None));
        }
        let what = if size > limits.size { SIZE } else { 0 }
            | if depth > limits.depth { DEPTH } else { 0 };
        if what != 0 {
            return Err(refuse(what, Some(h)));
        }
        Ok(h)
    }
}

impl Refused {
    /// The reject's private data.
    pub(super) fn encode(&self) -> [u8; LEN] {
        header(KIND_REFUSED, self.what, self.limits)
    }

    /// Reads the private data of a reject answering `asked`: `None` unless it
    /// is a version-1 refusal consistent with it (each limit it names is below
    /// what was asked, each value in range).
    pub(super) fn read(data: &[u8], asked: Hello) -> Option<Refused> {
        let (version, kind, what, reserved, size, depth) = fields(data)?;
        let limits = Hello { size, depth };
        let known = SIZE | DEPTH | OTHER_VERSION | UNREADABLE;
        if version != VERSION
            || kind != KIND_REFUSED
            || reserved != 0
            || what == 0
            || what & !known != 0
            || !in_range(limits)
            || (what & SIZE != 0 && size >= asked.size)
            || (what & DEPTH != 0 && depth >= asked.depth)
        {
            return None;
        }
        Some(Refused {
            what,
            asked: Some(asked),
            limits,
        })
    }
}

impl fmt::Display for Refused {
    /// As the side that reads it says it: "size 256 above the server's 64".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut item = |f: &mut fmt::Formatter<'_>, a: fmt::Arguments<'_>| {
            let r = write!(f, "{}{}", sep, a);
            sep = ", ";
            r
        };
        let l = self.limits;
        if let Some(a) = self.asked {
            if self.what & SIZE != 0 {
                item(f, fmt!("size {} above the server's {}", a.size, l.size))?;
            }
            if self.what & DEPTH != 0 {
                item(f, fmt!("depth {} above the server's {}", a.depth, l.depth))?;
            }
        }
        if self.what & OTHER_VERSION != 0 {
            item(f, fmt!("the server speaks hello version {} only", VERSION))?;
        }
        if self.what & UNREADABLE != 0 {
            item(f, fmt!("no readable hello (size and depth) in the request"))?;
        }
        Ok(())
    }
}

#[kunit_tests(cmecho_hello)]
mod tests {
    use super::*;
    use kernel::str::CString;

    const SERVER: Hello = Hello { size: 64, depth: 1 };

    fn pad(b: [u8; LEN]) -> [u8; 56] {
        let mut p = [0u8; 56];
        p[..LEN].copy_from_slice(&b);
        p
    }

    #[test]
    fn within_limits_accepted() {
        let h = Hello { size: 64, depth: 1 };
        assert_eq!(Hello::check(&pad(h.encode()), SERVER), Ok(h));
        let small = Hello { size: 1, depth: 1 };
        assert_eq!(Hello::check(&small.encode(), SERVER), Ok(small));
    }

    #[test]
    fn above_limits_refused_and_explained() {
        let h = Hello {
            size: 256,
            depth: 8,
        };
        let r = Hello::check(&pad(h.encode()), SERVER).unwrap_err();
        let back = Refused::read(&pad(r.encode()), h).unwrap();
        assert_eq!(back, r);
        let text = CString::try_from_fmt(fmt!("{}", back)).unwrap();
        assert_eq!(
            text.to_bytes(),
            b"size 256 above the server's 64, depth 8 above the server's 1"
        );
        let only_size = Hello {
            size: 128,
            depth: 1,
        };
        let r = Hello::check(&only_size.encode(), SERVER).unwrap_err();
        assert_eq!(r.what, SIZE);
        let only_depth = Hello { size: 8, depth: 2 };
        assert_eq!(
            Hello::check(&only_depth.encode(), SERVER).unwrap_err().what,
            DEPTH
        );
    }

    #[test]
    fn malformed_requests_unreadable() {
        let good = Hello { size: 8, depth: 1 }.encode();
        // No hello at all: what a peer that sends no private data gives (zeros).
        assert_eq!(
            Hello::check(&[0u8; 56], SERVER).unwrap_err().what,
            UNREADABLE
        );
        assert_eq!(Hello::check(&[], SERVER).unwrap_err().what, UNREADABLE);
        assert_eq!(
            Hello::check(&good[..LEN - 1], SERVER).unwrap_err().what,
            UNREADABLE
        );
        for (at, v) in [(0, b'X'), (5, KIND_REFUSED), (6, 1), (7, 1)] {
            let mut b = good;
            b[at] = v;
            assert_eq!(Hello::check(&b, SERVER).unwrap_err().what, UNREADABLE);
        }
        let mut v2 = good;
        v2[4] = 2;
        assert_eq!(Hello::check(&v2, SERVER).unwrap_err().what, OTHER_VERSION);
        for (size, depth) in [
            (0, 1),
            (8, 0),
            (MAX_SIZE + 1, 1),
            (8, MAX_DEPTH + 1),
            (u32::MAX, u32::MAX),
        ] {
            let h = Hello { size, depth };
            assert_eq!(
                Hello::check(&h.encode(), SERVER).unwrap_err().what,
                UNREADABLE
            );
        }
    }

    #[test]
    fn inconsistent_refusals_ignored() {
        let asked = Hello {
            size: 256,
            depth: 8,
        };
        let ok = Refused {
            what: SIZE,
            asked: None,
            limits: SERVER,
        };
        assert!(Refused::read(&ok.encode(), asked).is_some());
        // A limit named as refused that is not below what was asked.
        let lie = Refused {
            what: SIZE,
            asked: None,
            limits: Hello {
                size: 256,
                depth: 1,
            },
        };
        assert!(Refused::read(&lie.encode(), asked).is_none());
        for (at, v) in [
            (0, b'X'),
            (4, 2),
            (5, KIND_HELLO),
            (6, 0),
            (6, 0x10),
            (7, 1),
        ] {
            let mut b = ok.encode();
            b[at] = v;
            assert!(Refused::read(&b, asked).is_none());
        }
        assert!(Refused::read(&[0u8; 148], asked).is_none());
    }
}
