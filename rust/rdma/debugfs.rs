// SPDX-License-Identifier: GPL-2.0

//! debugfs files whose text a Rust value writes.
//!
//! Not RDMA, but here because this is where cmecho's `unsafe` lives. The
//! kernel's own `kernel::debugfs` files have no owner in their file
//! operations: an open file does not pin the module, and closing it after
//! `rmmod` runs code that is gone. These files come from
//! `rust/helpers/debugfs.c`, whose file operations name the module as their
//! owner, so `rmmod` fails while one is open.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h)

use super::ffi;
use core::ptr::NonNull;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::Arc;

/// What a [`File`] shows.
pub(crate) trait Show: Send + Sync {
    /// Writes the file's whole text. Runs in process context, each time the
    /// file is read from its start; may sleep.
    fn show(&self, w: &mut dyn core::fmt::Write) -> core::fmt::Result;
}

/// A debugfs directory, removed with what is in it when the last reference
/// to it goes.
///
/// # Invariants
///
/// `dentry` is what `debugfs_create_dir` returned (a directory, or an error
/// pointer if it could not be made), removed only by `drop`; `parent` keeps
/// the directory it is in from being removed first.
pub(crate) struct Dir {
    dentry: *mut ffi::Dentry,
    _parent: Option<Arc<Dir>>,
}

// SAFETY: A dentry may be used and removed from any thread.
unsafe impl Send for Dir {}
// SAFETY: `Dir` has no method that changes it through a shared reference.
unsafe impl Sync for Dir {}

impl Dir {
    /// `name` at the top of debugfs. Without debugfs, or when it cannot be
    /// made, files made in it are not made either; `ENOMEM` only when the
    /// handle cannot be allocated.
    pub(crate) fn root(name: &CStr) -> Result<Arc<Self>> {
        Self::make(name, None)
    }

    /// `name` in this directory.
    pub(crate) fn subdir(self: &Arc<Self>, name: &CStr) -> Result<Arc<Self>> {
        Self::make(name, Some(self.clone()))
    }

    fn make(name: &CStr, parent: Option<Arc<Dir>>) -> Result<Arc<Self>> {
        let p = parent.as_ref().map_or(core::ptr::null_mut(), |d| d.dentry);
        // SAFETY: `name` is a NUL-terminated string; `p` is null (debugfs's
        // root) or the parent's dentry, kept by the reference in `parent`, or an
        // error pointer, which debugfs refuses as a parent.
        let dentry = unsafe { ffi::cmecho_debugfs_dir(name.as_char_ptr(), p) };
        // INVARIANT: `dentry` is what `debugfs_create_dir` returned; the parent's
        // reference is kept. If the `Arc` cannot be allocated, the value's drop
        // removes the directory.
        let dir = Self {
            dentry,
            _parent: parent,
        };
        Ok(Arc::new(dir, GFP_KERNEL)?)
    }

    /// A read-only file `name` in this directory that shows `data`.
    pub(crate) fn file(self: &Arc<Self>, name: &CStr, data: Arc<dyn Show>) -> Result<File> {
        let ctx = KBox::new(data, GFP_KERNEL)?;
        let ctx = NonNull::new(KBox::into_raw(ctx)).ok_or(ENOMEM)?;
        // SAFETY: `name` is NUL-terminated; `self.dentry` is this directory (or an
        // error pointer, refused by debugfs). `ctx` stays valid until `File`'s drop
        // has removed the file, and `cmecho_rs_debugfs_show` reads it as the box.
        let dentry = unsafe {
            ffi::cmecho_debugfs_file(name.as_char_ptr(), self.dentry, ctx.as_ptr().cast())
        };
        // INVARIANT: The file (or error pointer) with `ctx` as its data.
        Ok(File {
            dentry,
            ctx,
            _dir: self.clone(),
        })
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the dentry (or error pointer, ignored) is
        // removed only here; no file of ours is left in it (each holds a reference
        // on its directory).
        unsafe { ffi::cmecho_debugfs_remove(self.dentry) };
    }
}

/// A read-only debugfs file showing an [`Arc<dyn Show>`], removed when dropped.
///
/// # Invariants
///
/// `dentry` is what `debugfs_create_file` returned for data `ctx` (a file, or
/// an error pointer), removed only by `drop`; `ctx` came from
/// `KBox::<Arc<dyn Show>>::into_raw` and is freed only by `drop`, after the
/// removal. `_dir` keeps the file's directory.
pub(crate) struct File {
    dentry: *mut ffi::Dentry,
    ctx: NonNull<Arc<dyn Show>>,
    _dir: Arc<Dir>,
}

// SAFETY: The dentry may be removed from any thread, and the box holds an
// `Arc<dyn Show>`, which is `Send + Sync`.
unsafe impl Send for File {}
// SAFETY: `File` has no method that uses it through a shared reference.
unsafe impl Sync for File {}

impl Drop for File {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the file (or error pointer, ignored) is
        // removed only here. `debugfs_remove` waits for a show that runs, and no
        // other starts after it.
        unsafe { ffi::cmecho_debugfs_remove(self.dentry) };
        // SAFETY: By the type invariant the box came from `KBox::into_raw`; the
        // file that used it is gone, so nothing does any more.
        drop(unsafe { KBox::from_raw(self.ctx.as_ptr()) });
    }
}

/// A writer into a `seq_file`.
struct SeqWriter(*mut ffi::SeqFile);

impl core::fmt::Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: `self.0` is the `seq_file` of the show that runs (see
        // `cmecho_rs_debugfs_show`); the helper copies `s.len()` bytes of `s`.
        match unsafe { ffi::seq_write(self.0, s.as_ptr().cast(), s.len()) } {
            0 => Ok(()),
            // Full: seq_file calls the show again with a larger buffer.
            _ => Err(core::fmt::Error),
        }
    }
}

/// The show of every cmecho debugfs file (called by `rust/helpers/debugfs.c`).
///
/// # Safety
///
/// `ctx` must be the data of a live [`File`] and `m` the `seq_file` of a read
/// of it, within debugfs's protection against the file's removal.
#[no_mangle]
unsafe extern "C" fn cmecho_rs_debugfs_show(ctx: *mut c_void, m: *mut ffi::SeqFile) -> c_int {
    // SAFETY: By the caller's guarantee `ctx` is a live `File`'s box, which its
    // drop frees only after removing the file, and debugfs lets no show run
    // after that.
    let data = unsafe { &*ctx.cast::<Arc<dyn Show>>() };
    // A full buffer is not an error: seq_file sees it and calls again.
    let _ = data.show(&mut SeqWriter(m));
    0
}

/// The C side's type of [`cmecho_rs_debugfs_show`].
type ShowFn = unsafe extern "C" fn(*mut c_void, *mut ffi::SeqFile) -> c_int;

// The definition above and the header's prototype (as bindgen declares it) both
// have this type, or the build fails.
const _: [ShowFn; 2] = [cmecho_rs_debugfs_show, ffi::cmecho_rs_debugfs_show];
