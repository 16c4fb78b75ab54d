// SPDX-License-Identifier: GPL-2.0

//! The debugfs side of cmecho: `/sys/kernel/debug/cmecho/<endpoint>/connections`.
//!
//! The file lists every connection of an endpoint, one line each, in the format
//! of configfs's `connections` attribute, with no page limit: configfs gives an
//! attribute one page, and stops its listing with `truncated <n> more`. The
//! file is made with the endpoint (`mkdir`) and removed with it. It is a
//! debugging aid, not an ABI; scripts that need one value read configfs.
//!
//! Without debugfs, or when a directory cannot be made, an endpoint simply has
//! no file; only `ENOMEM` for the file's handles fails the `mkdir`. The files
//! are `crate::rdma::debugfs`'s, whose open files keep the module loaded.

use crate::echo::Shared;
use crate::rdma::debugfs::{Dir, File, Show};
use kernel::prelude::*;
use kernel::sync::Arc;

/// `/sys/kernel/debug/cmecho`, removed after the last endpoint's files.
pub(crate) struct Root(Arc<Dir>);

impl Root {
    /// Makes the directory.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self(Dir::root(c"cmecho")?))
    }

    /// Makes `<name>/connections`, listing the connections of `shared`.
    pub(crate) fn endpoint(&self, name: &CStr, shared: Arc<Shared>) -> Result<EndpointFiles> {
        let dir = self.0.subdir(name)?;
        Ok(EndpointFiles {
            _connections: dir.file(c"connections", shared)?,
        })
    }
}

/// The files of one endpoint, and its directory, removed when dropped (a read
/// under way finishes first).
pub(crate) struct EndpointFiles {
    _connections: File,
}

impl Show for Shared {
    /// `connections`: every connection of the endpoint, one line each.
    fn show(&self, w: &mut dyn core::fmt::Write) -> core::fmt::Result {
        for (n, c) in self.connections().iter().enumerate() {
            crate::configfs::conn_line(w, n, &**c)?;
        }
        Ok(())
    }
}
