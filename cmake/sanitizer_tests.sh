#!/bin/sh
# The sanitizer and fuzzing steps of `make test` (issue 6), one build directory each:
#
#   sanitizer_tests.sh asan   the whole test suite under AddressSanitizer (+ LeakSanitizer) and
#                             UndefinedBehaviorSanitizer, every error fatal, in $BUILD-asan
#                             (JATTN_TEST_QUICK=1: the largest parity shape is left out)
#   sanitizer_tests.sh tsan   the test suite (threaded CPU backends, test_concurrency's eight threads;
#                             the backward battery once, not per forced instruction set: below)
#                             under ThreadSanitizer in $BUILD-tsan: clang, OpenMP through
#                             LLVM's libomp with its TSan tool archer (gcc's libgomp is not
#                             instrumented and reports false races)
#   sanitizer_tests.sh fuzz   the libFuzzer harnesses of fuzz/ (clang, ASan + UBSan) in
#                             $BUILD-fuzz: the corpora replayed, then each harness run for
#                             FUZZ_SECONDS (default 30; make test passes 20); a crash fails the step and its input
#                             is left in $BUILD-fuzz/fuzz-artifacts/ (copy it into
#                             fuzz/corpus/<harness>/ to make it a regression test)
#
# allocator_may_return_null=1: an allocation too large for the sanitizer's allocator returns
# NULL as malloc would, so that the out-of-memory paths (exit 1, one line) are what is tested.
# tsan and fuzz skip (exit 0, saying why) when clang, libomp/archer or libFuzzer is missing.
# Environment: BUILD (default build), JOBS (default 2), CLANG (default clang), FUZZ_SECONDS.
# Run from the repository root.
set -eu

mode=${1:-}
BUILD=${BUILD:-build}
JOBS=${JOBS:-2}
CLANG=${CLANG:-clang}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
ROOT=$(pwd)
# Run in the plain build only: test_install builds a consumer of the installed library with
# plain flags, which cannot link an instrumented libjattn.a; test_cpu_neon_qemu cross-compiles
# its own uninstrumented aarch64 build, so a sanitizer run would repeat it unchanged.
NOT_UNDER_SANITIZERS='^(test_install|test_cpu_neon_qemu)$'
# TSan looks for races in the threaded walk, which the instruction sets share: the backward battery runs once
# there (test_backward_cpu, the machine's best set), not again per forced set (~100 s each under TSan; every set
# runs it in the plain and ASan builds). The forward suites still run per set (a few seconds each).
NOT_UNDER_TSAN='^(test_install|test_cpu_neon_qemu|test_backward_cpu_(generic|avx2|avx512|neon))$'
# The vk backend is left out of the sanitizer builds: its work runs inside the Vulkan driver
# (lavapipe's LLVM JIT), which is not instrumented, and lavapipe under ASan/TSan would add minutes.
SAN_CMAKE="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DJATTN_CUDA=OFF -DJATTN_VULKAN=OFF -DCMAKE_PROJECT_INCLUDE=$ROOT/cmake/sanitizers.cmake"

have_clang() {
    command -v "$CLANG" >/dev/null 2>&1
}

case "$mode" in
asan)
    dir=$BUILD-asan
    echo "== sanitizers: ASan + UBSan, whole test suite ($dir)"
    cmake -S . -B "$dir" $SAN_CMAKE -DJATTN_SANITIZE=address >/dev/null
    cmake --build "$dir" -j "$JOBS"
    cd "$dir"
    JATTN_TEST_QUICK=1 \
    ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure -j "$JOBS" -E "$NOT_UNDER_SANITIZERS"
    ;;
tsan)
    dir=$BUILD-tsan
    echo "== sanitizers: TSan, whole test suite ($dir)"
    if ! have_clang; then
        echo "SKIP tsan: $CLANG not found"
        exit 0
    fi
    llvm_lib=$(dirname "$(readlink -f "$(command -v "$CLANG")")")/../lib
    archer=$llvm_lib/libarcher.so
    if [ ! -f "$archer" ]; then
        echo "SKIP tsan: $archer not found (LLVM OpenMP's TSan tool; Debian: libomp-dev)"
        exit 0
    fi
    cmake -S . -B "$dir" $SAN_CMAKE -DCMAKE_C_COMPILER="$CLANG" -DJATTN_SANITIZE=thread >/dev/null
    cmake --build "$dir" -j "$JOBS"
    export TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
    export OMP_TOOL_LIBRARIES="$archer"
    if grep -q '^OpenMP_C_FOUND:.*=TRUE' "$dir/CMakeCache.txt" 2>/dev/null ||
        grep -q '^OpenMP_C_FLAGS:STRING=.*fopenmp' "$dir/CMakeCache.txt"; then
        # The OpenMP runtime must be libomp with archer loaded, or TSan cannot see its barriers.
        if ! ARCHER_OPTIONS=verbose=1 "$dir/tests/test_reference" 2>&1 | grep -q "Archer detected"; then
            echo "FAIL tsan: archer ($archer) was not loaded by the OpenMP runtime"
            exit 1
        fi
        echo "   archer loaded: OpenMP synchronisation visible to TSan"
    else
        echo "   note: built without OpenMP; TSan sees test_concurrency's threads only"
    fi
    cd "$dir"
    JATTN_TEST_QUICK=1 ctest --output-on-failure -j "$JOBS" -E "$NOT_UNDER_TSAN"
    ;;
fuzz)
    dir=$BUILD-fuzz
    echo "== fuzzing: libFuzzer + ASan + UBSan, ${FUZZ_SECONDS}s per harness ($dir)"
    if ! have_clang; then
        echo "SKIP fuzz: $CLANG not found"
        exit 0
    fi
    probe=$(mktemp -d)
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
        >"$probe/p.c"
    if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
        rm -rf "$probe"
        echo "SKIP fuzz: $CLANG cannot link -fsanitize=fuzzer (libFuzzer missing)"
        exit 0
    fi
    rm -rf "$probe"
    cmake -S . -B "$dir" $SAN_CMAKE -DCMAKE_C_COMPILER="$CLANG" -DJATTN_SANITIZE=fuzzer -DJATTN_OPENMP=OFF >/dev/null
    harnesses=""
    targets=$(cmake --build "$dir" --target help) # whole, so that make sees no broken pipe
    for h in fuzz_forward fuzz_npy fuzz_cli_args; do
        if printf '%s\n' "$targets" | grep -q "^\.\.\. $h\$"; then harnesses="$harnesses $h"; fi
    done
    # shellcheck disable=SC2086
    for h in $harnesses; do cmake --build "$dir" -j "$JOBS" --target "$h" "replay_$h"; done
    (cd "$dir" && ctest --output-on-failure -R '^fuzz_replay_')
    failed=""
    mkdir -p "$dir/fuzz-artifacts"
    for h in $harnesses; do
        work=$dir/fuzz-corpus/$h
        mkdir -p "$work"
        dict=""
        [ -f "fuzz/$h.dict" ] && dict="-dict=fuzz/$h.dict"
        log=$dir/fuzz-artifacts/$h.log
        echo "-- $h"
        # shellcheck disable=SC2086
        if "$dir/tests/$h" -max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1 $dict \
            -artifact_prefix="$dir/fuzz-artifacts/$h-" "$work" "fuzz/corpus/$h" >"$log" 2>&1; then
            grep -E "INITED|DONE|stat::number_of_executed_units" "$log" | sed 's/^/   /'
        else
            grep -E "property broken|ERROR|SUMMARY|Test unit written" "$log" | sed 's/^/   /'
            echo "   FAIL $h: crash input in $dir/fuzz-artifacts/ (log: $log);"
            echo "   copy it into fuzz/corpus/$h/ so that fuzz_replay_$h keeps it as a regression test"
            failed="$failed $h"
        fi
    done
    if [ -n "$failed" ]; then
        echo "FAIL fuzz:$failed"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 asan|tsan|fuzz" >&2
    exit 2
    ;;
esac
