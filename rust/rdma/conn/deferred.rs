// SPDX-License-Identifier: GPL-2.0

//! The completions a softirq CQ hands to process context
//! (`Conn::complete_fast`), kept in order until its work item
//! hands them to [`ConnHandler::completion`](super::ConnHandler::completion).

use crate::rdma::cq::WcError;
use crate::rdma::ffi;
use kernel::prelude::*;

/// A completion a softirq CQ deferred: its tag and outcome.
pub(super) type DeferredWc = (u32, Result<u32, WcError>);

/// The completions of a softirq CQ that go to process context
/// (`Conn::complete_fast`), in the order they came: a ring allocated with the QP
/// resources, so that the softirq never allocates.
pub(super) struct Deferred {
    pub(super) ring: KVec<DeferredWc>,
    pub(super) head: usize,
    pub(super) len: usize,
    /// The tag of the first completion that found the ring full: delivered
    /// after the ring as a failure (`IB_WC_GENERAL_ERR`, which every ULP of
    /// the layer takes as the end of the connection); every completion after
    /// it is dropped, so none is seen out of order.
    lost: Option<u32>,
    /// Completions queued or being handled: while not 0, every completion
    /// is deferred, so that the handler sees them in order.
    pub(super) pending: u32,
}

impl Deferred {
    pub(super) const fn new() -> Self {
        Self {
            ring: KVec::new(),
            head: 0,
            len: 0,
            lost: None,
            pending: 0,
        }
    }

    /// Queues `wc`; when the ring is full, keeps its tag to fail the
    /// connection with, and drops every completion after it.
    pub(super) fn push(&mut self, wc: DeferredWc) {
        let cap = self.ring.len();
        if self.lost.is_some() {
            return;
        }
        if self.len < cap {
            let i = (self.head + self.len) % cap;
            self.ring[i] = wc;
            self.len += 1;
        } else {
            self.lost = Some(wc.0);
        }
        self.pending += 1;
    }

    /// The oldest completion queued; the lost one, as a failure, last.
    pub(super) fn pop(&mut self) -> Option<DeferredWc> {
        if self.len > 0 {
            let wc = self.ring[self.head];
            self.head = (self.head + 1) % self.ring.len();
            self.len -= 1;
            return Some(wc);
        }
        self.lost
            .take()
            .map(|tag| (tag, Err(WcError(ffi::IB_WC_GENERAL_ERR))))
    }
}

#[kernel::prelude::kunit_tests(cmecho_conn_deferred)]
mod tests {
    use super::*;

    fn ring(cap: usize) -> Deferred {
        let mut d = Deferred::new();
        for _ in 0..cap {
            d.ring.push((0, Ok(0)), GFP_KERNEL).unwrap();
        }
        d
    }

    #[test]
    fn in_order_across_the_wrap() {
        let mut d = ring(3);
        for round in 0..4u32 {
            d.push((round, Ok(round)));
            d.push((round + 100, Err(WcError(ffi::IB_WC_WR_FLUSH_ERR))));
            assert_eq!(d.pending, 2);
            assert_eq!(d.pop(), Some((round, Ok(round))));
            assert_eq!(
                d.pop(),
                Some((round + 100, Err(WcError(ffi::IB_WC_WR_FLUSH_ERR))))
            );
            assert_eq!(d.pop(), None);
            d.pending = 0;
        }
    }

    #[test]
    fn full_fails_once_after_the_rest() {
        let mut d = ring(2);
        for tag in 0..5 {
            d.push((tag, Ok(1)));
        }
        // Two kept, the third's tag kept as the failure, the rest dropped.
        assert_eq!(d.pending, 3);
        assert_eq!(d.pop(), Some((0, Ok(1))));
        assert_eq!(d.pop(), Some((1, Ok(1))));
        assert_eq!(d.pop(), Some((2, Err(WcError(ffi::IB_WC_GENERAL_ERR)))));
        assert_eq!(d.pop(), None);
    }

    #[test]
    fn nothing_after_the_loss() {
        let mut d = ring(2);
        for tag in 0..3 {
            d.push((tag, Ok(1)));
        }
        // Room again, but the loss stands: what comes after it is dropped.
        assert_eq!(d.pop(), Some((0, Ok(1))));
        d.push((3, Ok(1)));
        assert_eq!(d.pop(), Some((1, Ok(1))));
        assert_eq!(d.pop(), Some((2, Err(WcError(ffi::IB_WC_GENERAL_ERR)))));
        assert_eq!(d.pop(), None);
    }

    #[test]
    fn no_ring_fails_the_first() {
        let mut d = Deferred::new();
        d.push((7, Ok(1)));
        d.push((8, Ok(1)));
        assert_eq!(d.pending, 1);
        assert_eq!(d.pop(), Some((7, Err(WcError(ffi::IB_WC_GENERAL_ERR)))));
        assert_eq!(d.pop(), None);
    }
}
