# SPDX-License-Identifier: GPL-2.0
# Shared settings for cmecho's scripts: where the cache lives and which tools to use.
# Source it; it defines variables and functions only.
CMECHO_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
. "$CMECHO_TOP/scripts/versions.env"
CMECHO_CACHE=${CMECHO_CACHE:-$HOME/.cache/cmecho}
APT_DIR=$CMECHO_CACHE/apt
KSRC=$CMECHO_CACHE/linux-source-$KERNEL_DEB_VERSION/linux-source-$KERNEL_SERIES
CARGO_ROOT=$CMECHO_CACHE/cargo
VENV=$CMECHO_CACHE/venv
# The line scripts/vm-run's command writes to the guest's kernel log first: a
# guest that died without it on its console died before the command started.
VM_RUN_STARTED="vm-run: the command starts"

# rustup's toolchain, where a non-login shell (CI) may not have it on PATH.
if ! command -v rustc >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/rustc" ]; then
	export PATH="$HOME/.cargo/bin:$PATH"
fi

die() { echo "cmecho: error: $*" >&2; exit 1; }
say() { echo "cmecho: $*" >&2; }

# The private apt configuration for $BACKPORTS_SUITE, whose sources list
# scripts/setup-toolchain writes: it downloads .debs, installs nothing.
APT_OPTS=(-o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache::archives=$APT_DIR/archives"
	-o Dir::State::status=/dev/null -o APT::Sandbox::User=root)
apt_updated=
# Downloads a package of $BACKPORTS_SUITE into $APT_DIR/dl once; prints the .deb's path.
backports_download() { # package version [architecture, default all]
	local deb="$APT_DIR/dl/${1}_${2//:/%3a}_${3:-all}.deb"
	if [ ! -s "$deb" ]; then
		[ -f "$APT_DIR/sources.list" ] || die "no private apt configuration in $APT_DIR: run scripts/setup-toolchain"
		if [ -z "$apt_updated" ]; then
			apt-get "${APT_OPTS[@]}" update -q >/dev/null || die "apt-get update of $BACKPORTS_SUITE failed"
			apt_updated=1
		fi
		(cd "$APT_DIR/dl" && apt-get "${APT_OPTS[@]}" download -q "$1=$2" >/dev/null) \
			|| die "cannot download $1=$2 from $BACKPORTS_SUITE"
		[ -s "$deb" ] || die "apt-get download of $1=$2 did not write $deb"
	fi
	echo "$deb"
}

rustc_version() { rustc --version | awk '{print $2}'; }
rust_src_dir() { echo "$CMECHO_CACHE/rust-src-$(rustc_version)"; }

# The exports a kernel or module build needs for Rust.
toolchain_env() {
	export RUST_LIB_SRC
	RUST_LIB_SRC="$(rust_src_dir)/usr/lib/rustlib/src/rust/library"
	export LIBCLANG_PATH
	LIBCLANG_PATH=$("$VENV/bin/python3" -c 'import clang, os; print(os.path.join(os.path.dirname(clang.__file__), "native"))' 2>/dev/null)
	export PATH="$CARGO_ROOT/bin:$VENV/bin:$PATH"
}

# Which kernel: `debug` (the default; what `make check` and `make demo` boot) or
# `bench` (Debian's .config with the fragment, without the debug detectors, for
# `make bench`; scripts/kernel-bench.config).
CMECHO_FLAVOUR=${CMECHO_FLAVOUR:-debug}
case "$CMECHO_FLAVOUR" in
debug | bench) ;;
*) echo "cmecho: error: CMECHO_FLAVOUR must be debug or bench, not $CMECHO_FLAVOUR" >&2; exit 1 ;;
esac
# The fragment that makes the flavour, applied last.
flavour_config() { echo "$CMECHO_TOP/scripts/kernel-$CMECHO_FLAVOUR.config"; }

# The cache key of a kernel build: kernel version, config fragment, toolchain versions.
kernel_key() {
	{
		echo "$KERNEL_DEB_VERSION"
		rustc --version
		"clang$KERNEL_LLVM" --version 2>/dev/null | head -1
		echo "bindgen $BINDGEN_VERSION libclang $LIBCLANG_VERSION vng $VIRTME_NG_VERSION"
		cat "$CMECHO_TOP/tools/testing/selftests/cmecho/config"
		cat "$CMECHO_TOP/scripts/kernel-trims.config"
		cat "$(flavour_config)"
		# The bench kernel's base: Debian's .config, built with GCC.
		if [ "$CMECHO_FLAVOUR" = bench ]; then
			echo "$DISTRO_HEADERS_PKG $DISTRO_HEADERS_DEB_VERSION"
			gcc --version | head -1
		fi
	} | sha256sum | cut -c1-12
}
# The make arguments every kernel and module build uses: the clang toolchain.
KMAKE_ARGS=("LLVM=$KERNEL_LLVM")

kernel_dir() { echo "$CMECHO_CACHE/kernel-$(kernel_key)"; }

# The cache key of the distribution tree (scripts/build-distro-tree): the distribution's
# headers package, the kernel source, the toolchain that builds the tree (GCC, not clang).
distro_key() {
	{
		echo "$DISTRO_HEADERS_PKG $DISTRO_HEADERS_DEB_VERSION $KERNEL_DEB_VERSION"
		rustc --version
		gcc --version | head -1
		echo "bindgen $BINDGEN_VERSION libclang $LIBCLANG_VERSION"
	} | sha256sum | cut -c1-12
}
distro_dir() { echo "$CMECHO_CACHE/distro-$(distro_key)"; }

# The make arguments of a module build against the kernel tree $1, one a line: those
# of the test kernel (KMAKE_ARGS) for a clang-built tree, none for a GCC-built one (a
# distribution's kernel, the distribution tree): modules use the kernel's compiler.
kdir_make_args() { # kernel tree
	if grep -q '^CONFIG_CC_IS_CLANG=y' "$1/.config" 2>/dev/null; then
		printf '%s\n' "${KMAKE_ARGS[@]}"
	fi
}

# bench_modules: the bench kernel (built, or found in the cache) and cmecho's
# modules built for it, in BENCH_KDIR and BENCH_BUILD (make bench, make
# two-hosts). The bench kernel is Debian's own .config, built with GCC, with the
# test kernel's fragment but without its debug detectors
# (scripts/kernel-bench.config). The modules are built in a copy of the
# sources in the cache, so the tree's own build (for the debug kernel, make check)
# is left alone. Run from the top of a git checkout.
bench_modules() {
	local f
	BENCH_KDIR=$(CMECHO_FLAVOUR=bench "$CMECHO_TOP/scripts/build-kernel")
	"$CMECHO_TOP/scripts/ksft-links"
	# The sources git tracks, copied with their times (kbuild rebuilds only what
	# changed). Sources git no longer tracks go first: a file left from an older
	# tree (say rust/configfs.rs beside rust/configfs/mod.rs) would break the
	# build. A first copy has none of these directories yet: find fails, and
	# nothing is removed.
	BENCH_BUILD=$CMECHO_CACHE/bench-build
	mkdir -p "$BENCH_BUILD"
	(cd "$BENCH_BUILD" && find rust samples tools -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) \
		! -name '*_generated.rs' 2>/dev/null || true) |
		while read -r f; do
			git ls-files --error-unmatch -- "$f" >/dev/null 2>&1 || rm -f "$BENCH_BUILD/$f"
		done
	git ls-files -z Kbuild Makefile rust samples tools/testing/selftests/cmecho |
		tar --null -T - -cf - | tar -C "$BENCH_BUILD" -xf -
	toolchain_env
	say "building cmecho's modules for the bench kernel in $BENCH_BUILD"
	local margs
	mapfile -t margs < <(kdir_make_args "$BENCH_KDIR")
	make -C "$BENCH_KDIR" "${margs[@]}" M="$BENCH_BUILD" modules >"$BENCH_BUILD/build.log" 2>&1 ||
		{ tail -30 "$BENCH_BUILD/build.log" >&2; die "module build for the bench kernel failed; log: $BENCH_BUILD/build.log"; }
}
