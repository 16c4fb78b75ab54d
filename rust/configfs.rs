// SPDX-License-Identifier: GPL-2.0

//! The configfs interface of cmecho: `/sys/kernel/config/cmecho`.

use kernel::configfs;
use kernel::configfs_attrs;
use kernel::fmt::Write as _;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// Creates the `cmecho` configfs subsystem.
pub(crate) fn subsystem() -> impl PinInit<configfs::Subsystem<Root>, Error> {
    let item_type = configfs_attrs! {
        container: configfs::Subsystem<Root>,
        data: Root,
        attributes: [
            version: 0,
        ],
    };
    configfs::Subsystem::new(c"cmecho", item_type, try_pin_init!(Root {}))
}

/// The data of the subsystem's root directory.
#[pin_data]
pub(crate) struct Root {}

#[vtable]
impl configfs::AttributeOperations<0> for Root {
    type Data = Root;

    /// `version`: the module's version, read-only.
    fn show(_this: &Root, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        let mut writer = kernel::str::Formatter::new(page);
        writeln!(writer, "{}", crate::VERSION)?;
        Ok(writer.bytes_written())
    }
}
