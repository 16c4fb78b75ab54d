// SPDX-License-Identifier: GPL-2.0

//! How connection setup fails: the step that failed, and why.

use super::params::PrivateData;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// A failed step of connection setup: which CM call, and the errno or CM status.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepError {
    /// The step, named after the CM call or event.
    pub(crate) step: &'static str,
    /// The error.
    pub(crate) err: Error,
    /// The CM event's status where the failure came as an event (e.g. a reject reason).
    pub(crate) status: Option<i32>,
    /// The CM's description of a reject reason.
    pub(crate) reject_msg: Option<&'static CStr>,
    /// How many times the step was attempted (more than one after timeouts).
    pub(crate) attempts: u16,
    /// The private data of the peer's reject, when it rejected: untrusted.
    pub(crate) reject_data: Option<PrivateData>,
}

impl From<StepError> for Error {
    fn from(e: StepError) -> Error {
        e.err
    }
}

/// `Ok` for a CM call's non-negative return, else the [`StepError`] of `step`.
pub(super) fn to_step(step: &'static str, ret: c_int) -> Result<(), StepError> {
    if ret < 0 {
        Err(StepError {
            step,
            err: Error::from_errno(ret),
            status: None,
            reject_msg: None,
            attempts: 1,
            reject_data: None,
        })
    } else {
        Ok(())
    }
}

/// The [`StepError`] of `step` failing with `err`, at its first attempt.
pub(super) fn step_err(step: &'static str, err: Error) -> StepError {
    StepError {
        step,
        err,
        status: None,
        reject_msg: None,
        attempts: 1,
        reject_data: None,
    }
}

#[kunit_tests(cmecho_step_error)]
mod tests {
    use super::*;

    #[test]
    fn negative_returns_fail_the_step() {
        assert!(to_step("rdma_listen", 0).is_ok());
        assert!(to_step("rdma_listen", 1).is_ok());
        let e = to_step("rdma_listen", EADDRINUSE.to_errno()).unwrap_err();
        assert_eq!(e.step, "rdma_listen");
        assert_eq!(e.err, EADDRINUSE);
        assert_eq!(e.status, None);
        assert_eq!(e.attempts, 1);
        assert_eq!(Error::from(e), EADDRINUSE);
    }

    #[test]
    fn step_err_names_the_step() {
        let e = step_err("rdma_connect", ETIMEDOUT);
        assert_eq!((e.step, e.err, e.attempts), ("rdma_connect", ETIMEDOUT, 1));
        assert!(e.reject_msg.is_none());
    }
}

/// Whether a message may be logged now, under the kernel's rate limit
/// (`__ratelimit()` at its defaults: 10 messages in 5 s), one for the module: a
/// peer that makes the ULP fail its connections in a loop must not flood the
/// log. When it resumes after refusing, the kernel logs how many it refused;
/// the caller counts its own.
pub(crate) fn log_ratelimit() -> bool {
    // SAFETY: The helper takes no argument and touches only its own static
    // state, under that state's lock; it may be called in any context.
    unsafe { super::ffi::cmecho_log_ratelimit() }
}
