#!/bin/sh
# Install test of libjattn_parallel: `cmake --install` the build into a temporary prefix, then
# build tests/install_consumer_parallel/consumer_parallel.c (jattn_sp_forward over MPI, each
# algorithm, checked against the ref backend) and run it under mpiexec -np 2, four ways:
#   1. pkg-config jattn-parallel, shared libraries, with -Wl,-rpath;
#   2. pkg-config --static, against a copy of the prefix without the shared libraries;
#   3. and 4. find_package(jattn COMPONENTS parallel): jattn::parallel and jattn::parallel_static.
# The consumer is compiled with MPI's compiler wrapper (it includes mpi.h itself).
# Arguments: build dir, consumer dir, mpicc, cmake, mpiexec and its flags.
set -u
BUILD=$1
CONSUMER=$2
MPICC=$3
CMAKE=$4
shift 4
MPIEXEC="$*"
T=$(mktemp -d "${TMPDIR:-/tmp}/test_install_parallel.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
P=$T/prefix
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
step() { # step WHAT CMD...: run, show the output on failure
    what=$1
    shift
    if "$@" >"$T/log" 2>&1; then pass; return 0; fi
    fail "$what:"
    cat "$T/log"
    return 1
}
run2() { # run2 WHAT PROGRAM LABEL: under mpiexec -np 2, print its report
    # shellcheck disable=SC2086
    step "$1" $MPIEXEC -np 2 "$2" "$3" && grep -v '^$' "$T/log"
}

step "cmake --install" "$CMAKE" --install "$BUILD" --prefix "$P" || { echo "test_install_parallel: $passed passed, $failed failed"; exit 1; }
LIBDIR=$(dirname "$(find "$P" -name 'libjattn_parallel.a' | head -n 1)")
[ -f "$LIBDIR/libjattn_parallel.a" ] && ls "$LIBDIR"/libjattn_parallel.so* >/dev/null 2>&1 && pass ||
    fail "libjattn_parallel.a / .so not installed"

if step "configure the find_package consumer" "$CMAKE" -S "$CONSUMER" -B "$T/cmake-build" -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_C_COMPILER="$MPICC" -DCMAKE_BUILD_TYPE=Release &&
    step "build the find_package consumer" "$CMAKE" --build "$T/cmake-build"; then
    run2 "run the consumer linked to jattn::parallel" "$T/cmake-build/consumer_parallel_shared" find_package-shared
    run2 "run the consumer linked to jattn::parallel_static" "$T/cmake-build/consumer_parallel_static" find_package-static
fi

if command -v pkg-config >/dev/null 2>&1; then
    PKG_CONFIG_PATH=$LIBDIR/pkgconfig
    export PKG_CONFIG_PATH
    # shellcheck disable=SC2046
    step "build with pkg-config jattn-parallel (shared)" "$MPICC" -o "$T/pc_shared" "$CONSUMER/consumer_parallel.c" \
        $(pkg-config --cflags --libs jattn-parallel) -Wl,-rpath,"$LIBDIR" -lm &&
        run2 "run the pkg-config shared consumer" "$T/pc_shared" pkg-config-shared
    cp -R "$P" "$T/static-prefix"
    SLIBDIR=$T/static-prefix/${LIBDIR#"$P"/}
    rm -f "$SLIBDIR"/libjattn*.so*
    PKG_CONFIG_PATH=$SLIBDIR/pkgconfig
    # shellcheck disable=SC2046
    step "build with pkg-config --static jattn-parallel" "$MPICC" -o "$T/pc_static" "$CONSUMER/consumer_parallel.c" \
        $(pkg-config --static --cflags --libs jattn-parallel) -lm &&
        run2 "run the pkg-config static consumer" "$T/pc_static" pkg-config-static
else
    echo "pkg-config absent: the pkg-config checks are skipped"
fi
echo "test_install_parallel: $passed passed, $failed failed"
[ $failed -eq 0 ]
