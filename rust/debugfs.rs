// SPDX-License-Identifier: GPL-2.0

//! The debugfs side of cmecho: `/sys/kernel/debug/cmecho/<endpoint>/connections`.
//!
//! The file lists every connection of an endpoint, one line each, in the format
//! of configfs's `connections` attribute, with no page limit: configfs gives an
//! attribute one page, and stops its listing with `truncated <n> more`. The
//! file is made with the endpoint (`mkdir`) and removed with it. It is a
//! debugging aid, not an ABI; scripts that need one value read configfs.
//!
//! Nothing here fails an endpoint: without debugfs, or when a directory cannot
//! be made, the endpoint simply has no file. One case leaves no file: an
//! endpoint made while one of the same name is still being released (its
//! `rmdir` returned, but a process still holds one of its attribute files open).

use crate::echo::Shared;
use kernel::debugfs::{Dir, File};
use kernel::fmt;
use kernel::prelude::*;
use kernel::sync::Arc;

/// `/sys/kernel/debug/cmecho`, removed when dropped.
pub(crate) struct Root(Dir);

impl Root {
    /// Makes the directory.
    pub(crate) fn new() -> Self {
        Self(Dir::new(c"cmecho"))
    }

    /// Makes `<name>/connections`, listing the connections of `shared`.
    ///
    /// `ENOMEM` when the file's handle cannot be allocated.
    pub(crate) fn endpoint(&self, name: &CStr, shared: Arc<Shared>) -> Result<EndpointFiles> {
        let dir = self.0.subdir(name);
        let connections = KBox::pin_init(
            dir.read_callback_file(c"connections", Ok::<_, Error>(shared), &connections),
            GFP_KERNEL,
        )?;
        Ok(EndpointFiles {
            _connections: connections,
            _dir: dir,
        })
    }
}

/// The files of one endpoint, removed when dropped (a read under way finishes
/// first).
pub(crate) struct EndpointFiles {
    _connections: Pin<KBox<File<Arc<Shared>>>>,
    _dir: Dir,
}

/// Writes `connections`: every connection of the endpoint, one line each.
fn connections(shared: &Arc<Shared>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (n, c) in shared.connections().iter().enumerate() {
        crate::configfs::conn_line(f, n, &**c)?;
    }
    Ok(())
}
