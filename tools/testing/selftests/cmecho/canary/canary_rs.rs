// SPDX-License-Identifier: GPL-2.0

//! The Rust half of cmecho's harness canary (`scripts/check --canary`): what only
//! Rust code can show the debug kernel catching. Never loaded by the selftests.
//!
//! - `use_after_free=1`: a read through a raw pointer of a freed `KBox`; KASAN
//!   must report it in this module's Rust code (`slab-use-after-free in _R...`),
//!   which it does only if rustc instrumented the crate (`RUSTFLAGS_KASAN`).
//! - `overflow=1`: an addition that overflows a `u8`; with
//!   `CONFIG_RUST_OVERFLOW_CHECKS` it panics (`attempt to add with overflow`),
//!   and the kernel's panic handler turns that into a `BUG()` that kills insmod.
//! - `debug_assert=1`: a `debug_assert!` that fails; with
//!   `CONFIG_RUST_DEBUG_ASSERTIONS` it panics the same way.
//!
//! A panic leaves this module loading for good (its init never returns), so a
//! boot loads it with a panicking fault once, last.
//!
//! Unlike cmecho's own Rust, this module holds `unsafe` outside `rust/rdma/`: its
//! one purpose is the undefined behaviour KASAN exists to catch.

use kernel::prelude::*;

module! {
    type: CanaryRs,
    name: "cmecho_canary_rs",
    authors: ["cmecho developers"],
    description: "cmecho test harness canary: KASAN and overflow checks in Rust code",
    license: "GPL",
    params: {
        use_after_free: bool {
            default: false,
            description: "Read a freed KBox through a raw pointer (KASAN)",
        },
        overflow: bool {
            default: false,
            description: "Overflow a u8 (Rust overflow check: panic)",
        },
        debug_assert: bool {
            default: false,
            description: "Fail a debug_assert! (Rust debug assertions: panic)",
        },
    },
}

struct CanaryRs;

/// Reads the first byte of a box after freeing it.
#[inline(never)]
fn use_after_free() -> Result {
    let raw = KBox::into_raw(KBox::new([0xca_u8; 64], GFP_KERNEL)?);
    // SAFETY: `raw` comes from `KBox::into_raw` just above and is turned back into
    // a box once, here.
    drop(unsafe { KBox::from_raw(raw) });
    // SAFETY: none: `raw` was freed on the line above. This is the deliberate
    // use-after-free the canary exists for; KASAN must report it.
    let byte = unsafe { core::ptr::read_volatile(raw.cast::<u8>()) };
    pr_info!("cmecho_canary_rs: read after free: {byte}\n");
    Ok(())
}

/// Adds 1 to a `u8` of 255 that the compiler cannot see.
#[inline(never)]
fn overflow() {
    let max: u8 = core::hint::black_box(u8::MAX);
    let sum = max + core::hint::black_box(1);
    pr_info!("cmecho_canary_rs: {max} + 1 = {sum}\n");
}

impl kernel::Module for CanaryRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        if module_parameters::use_after_free.value() {
            use_after_free()?;
        }
        if module_parameters::overflow.value() {
            overflow();
        }
        if module_parameters::debug_assert.value() {
            debug_assert!(
                core::hint::black_box(false),
                "cmecho_canary_rs: deliberate debug assertion"
            );
        }
        Ok(CanaryRs)
    }
}
