#!/bin/sh
# Install test: `cmake --install` the build into a temporary prefix, then build and run a
# consumer program (tests/install_consumer/consumer.c: jattn_forward on a FLUX-layout problem,
# checked against the ref backend) four ways:
#   1. pkg-config, shared library, with -Wl,-rpath;
#   2. pkg-config --static, against a copy of the prefix without the shared library (so the
#      static archive is what links; this also proves the .pc file is relocatable);
#   3. and 4. a CMake project doing find_package(jattn), linking jattn::jattn and
#      jattn::jattn_static; 5. the same project's C++ consumer (consumer.cpp) when it finds a
#      C++ compiler.
# Arguments: build dir, consumer dir, C compiler, cmake. Exit 77 (skipped) when pkg-config is
# absent, after the find_package checks.
set -u
BUILD=$1
CONSUMER=$2
CC=${3:-cc}
CMAKE=${4:-cmake}
T=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
P=$T/prefix
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
step() { # step WHAT CMD...: run, show output on failure
    what=$1
    shift
    if "$@" >"$T/log" 2>&1; then pass; return 0; fi
    fail "$what:"
    cat "$T/log"
    return 1
}

if ! step "cmake --install" "$CMAKE" --install "$BUILD" --prefix "$P"; then
    echo "test_install: $passed passed, $failed failed"
    exit 1
fi
for f in include/jattn.h bin/jattn; do
    [ -e "$P/$f" ] && pass || fail "not installed: $f"
done
LIBDIR=$(dirname "$(find "$P" -name 'libjattn.a' | head -n 1)")
[ -f "$LIBDIR/libjattn.a" ] && ls "$LIBDIR"/libjattn.so* >/dev/null 2>&1 && pass || fail "libjattn.a / libjattn.so not installed"
"$P/bin/jattn" --version >/dev/null 2>&1 && pass || fail "installed jattn --version"

# ---- find_package ----
if step "configure the find_package consumer" "$CMAKE" -S "$CONSUMER" -B "$T/cmake-build" \
    -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release &&
    step "build the find_package consumer" "$CMAKE" --build "$T/cmake-build"; then
    step "run consumer linked to jattn::jattn" "$T/cmake-build/consumer_shared" find_package-shared && cat "$T/log"
    step "run consumer linked to jattn::jattn_static" "$T/cmake-build/consumer_static" find_package-static && cat "$T/log"
    if [ -x "$T/cmake-build/consumer_cxx" ]; then
        step "run the C++ consumer (jattn::jattn)" "$T/cmake-build/consumer_cxx" && cat "$T/log"
    else
        echo "no C++ compiler: the C++ consumer is skipped"
    fi
fi

# ---- pkg-config ----
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "pkg-config absent: the pkg-config checks are skipped"
    echo "test_install: $passed passed, $failed failed"
    [ $failed -eq 0 ] && exit 77
    exit 1
fi
PKG_CONFIG_PATH=$LIBDIR/pkgconfig
export PKG_CONFIG_PATH
if step "pkg-config finds jattn" pkg-config --exists jattn; then
    # shellcheck disable=SC2046
    step "build with pkg-config (shared)" "$CC" -o "$T/pc_shared" "$CONSUMER/consumer.c" \
        $(pkg-config --cflags --libs jattn) -Wl,-rpath,"$LIBDIR" -lm &&
        step "run pkg-config shared consumer" "$T/pc_shared" pkg-config-shared && cat "$T/log"
    # The static link: a copy of the prefix without libjattn.so, found through the relocated .pc.
    cp -R "$P" "$T/static-prefix"
    SLIBDIR=$T/static-prefix/${LIBDIR#"$P"/}
    rm -f "$SLIBDIR"/libjattn.so*
    PKG_CONFIG_PATH=$SLIBDIR/pkgconfig
    # shellcheck disable=SC2046
    step "build with pkg-config --static" "$CC" -o "$T/pc_static" "$CONSUMER/consumer.c" \
        $(pkg-config --static --cflags --libs jattn) -lm &&
        step "run pkg-config static consumer" "$T/pc_static" pkg-config-static && cat "$T/log"
    if command -v readelf >/dev/null 2>&1 && [ -f "$T/pc_static" ]; then
        readelf -d "$T/pc_static" | grep -q 'libjattn' && fail "static consumer needs libjattn.so" || pass
    fi
fi
echo "test_install: $passed passed, $failed failed"
[ $failed -eq 0 ]
