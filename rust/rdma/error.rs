// SPDX-License-Identifier: GPL-2.0

//! How connection setup fails: the step that failed, and why.

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
    pub(crate) attempts: u8,
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
    }
}
