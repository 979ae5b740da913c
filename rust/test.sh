#!/bin/sh
# make test-rust: every check of the Rust crates (rust/), in order:
#   1. cargo test      the parity, error, padding, context, FFI-layout and doc tests; jattn-sys's
#                      build.rs builds libjattn itself with CMake: in the C build $BUILD when there
#                      is one (make test has just built it: nothing is compiled twice), else in a
#                      tree of its own, $BUILD/rust-cmake (a fresh clone's `make test-rust`)
#   2. cargo clippy    --all-targets -D warnings (skipped when clippy is not installed)
#   3. cargo doc       --no-deps with RUSTDOCFLAGS=-D warnings
#   4. the feature `system`: `cmake --install` of that C build into $BUILD/rust-system-prefix,
#      then the whole test suite linked against the installed libjattn.a found by pkg-config,
#      and the FFI and API tests against the installed libjattn.so (JATTN_SYS_STATIC=0)
#      (skipped when pkg-config is absent)
# Everything is offline (no crate comes from crates.io). Build products stay under $BUILD:
# cargo's target dirs, the CMake tree every cargo command shares (so libjattn, CUDA kernels
# included, is compiled once, and not again while its sources are unchanged), the prefix.
# build.rs never reconfigures the C build $BUILD (it only builds its target jattn_static).
#
# Without cargo the step reports itself skipped, as the other optional steps of make test do,
# unless JATTN_REQUIRE_RUST=1 (set by .ci/run: CI machines have cargo, so there it is an error).
#
# Environment: BUILD (default build), JOBS (default 2), CARGO (default cargo), CMAKE (default cmake).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
JOBS=${JOBS:-2}
CARGO=${CARGO:-cargo}
CMAKE=${CMAKE:-cmake}
say() { echo "test-rust: $*"; }

if ! command -v "$CARGO" >/dev/null 2>&1; then
    if [ "${JATTN_REQUIRE_RUST:-0}" = 1 ]; then
        say "FAIL: $CARGO not found, and JATTN_REQUIRE_RUST=1 requires the Rust crates' tests" >&2
        exit 1
    fi
    say "SKIP: $CARGO not found (the crates in rust/ need cargo and rustc >= 1.85; JATTN_REQUIRE_RUST=1 makes this an error)"
    exit 0
fi

export CARGO_TARGET_DIR="$BUILD/rust-target"
if [ -f "$BUILD/CMakeCache.txt" ]; then
    export JATTN_SYS_CMAKE_BUILD_DIR="$BUILD"
else
    export JATTN_SYS_CMAKE_BUILD_DIR="$BUILD/rust-cmake"
fi
say "libjattn: the CMake tree $JATTN_SYS_CMAKE_BUILD_DIR"
cd "$ROOT/rust"
run() {
    say "$*"
    "$@"
}

run "$CARGO" test --offline -j "$JOBS" --workspace

if "$CARGO" clippy --version >/dev/null 2>&1; then
    run "$CARGO" clippy --offline -j "$JOBS" --workspace --all-targets -- -D warnings
else
    say "SKIP: cargo clippy is not installed"
fi

run env RUSTDOCFLAGS="-D warnings" "$CARGO" doc --offline -j "$JOBS" --no-deps --workspace

if ! command -v pkg-config >/dev/null 2>&1; then
    say "SKIP: pkg-config absent: the feature system (an installed libjattn) is not checked"
    exit 0
fi
# The C build of step 1 may hold only libjattn.a; install wants the rest of its targets too.
PREFIX=$BUILD/rust-system-prefix
run "$CMAKE" --build "$JATTN_SYS_CMAKE_BUILD_DIR" -j "$JOBS" >/dev/null
run "$CMAKE" --install "$JATTN_SYS_CMAKE_BUILD_DIR" --prefix "$PREFIX" >/dev/null
PC_DIR=$(dirname "$(find "$PREFIX" -name jattn.pc | head -n 1)")
LIB_DIR=$(dirname "$PC_DIR")
say "feature system: libjattn installed in $PREFIX, found by pkg-config through PKG_CONFIG_PATH=$PC_DIR"
run env PKG_CONFIG_PATH="$PC_DIR" JATTN_SYS_EXPECT_LINKED="system $LIB_DIR/libjattn.a" \
    "$CARGO" test --offline -j "$JOBS" --workspace --features jattn-sys/system
# The shared library, in a target dir of its own (so neither build undoes the other's).
run env PKG_CONFIG_PATH="$PC_DIR" JATTN_SYS_STATIC=0 LD_LIBRARY_PATH="$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    JATTN_SYS_EXPECT_LINKED="system -ljattn (shared)" CARGO_TARGET_DIR="$BUILD/rust-target-shared" \
    "$CARGO" test --offline -j "$JOBS" --workspace --features jattn-sys/system --test ffi_layout --test api
say "all passed"
