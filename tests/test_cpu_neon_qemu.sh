#!/bin/sh
# The NEON path of the cpu backend, tested rather than only compiled: cross-build the library
# (validation, reference, cpu backend with its NEON and portable kernels, the cuda stub) and
# the cpu tests for aarch64 with Debian's gcc-aarch64-linux-gnu, and run them under
# qemu-aarch64: the kernel, exp2 and thread tests (every ISA the aarch64 build has: neon,
# generic), then the parity suite at its quick shapes (JATTN_TEST_QUICK), the backward's gate, the
# masks' forward parity and the backward's masks part with JATTN_CPU_ISA=neon.
#
# usage: test_cpu_neon_qemu.sh SOURCE_DIR WORK_DIR
# exit 77 (skipped) when the cross compiler or qemu-aarch64 is absent, so a machine without
# them reports the test skipped, never passed. Install: apt-get install gcc-aarch64-linux-gnu qemu-user
set -u
SRC=${1:?source dir}
WORK=${2:?work dir}
CC=${JATTN_AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${JATTN_QEMU_AARCH64:-qemu-aarch64}
SYSROOT=${JATTN_AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
if ! command -v "$CC" >/dev/null 2>&1; then echo "SKIP: no $CC (apt-get install gcc-aarch64-linux-gnu)"; exit 77; fi
if ! command -v "$QEMU" >/dev/null 2>&1; then echo "SKIP: no $QEMU (apt-get install qemu-user)"; exit 77; fi
mkdir -p "$WORK" || exit 1

LIB="src/jattn.c src/mask.c src/plan.c src/validate.c src/threads.c src/reference.c
     src/cuda/cuda_unavailable.c src/vulkan/vk_unavailable.c
     src/cpu/cpu_backend.c src/cpu/cpu_isa.c src/cpu/cpu_key_blocks.c src/cpu/cpu_kernels_generic.c
     src/cpu/cpu_kernels_neon.c tests/harness.c tests/logit_floor.c tests/mask_rule.c kit/metrics.c kit/rng.c
     kit/tensor.c kit/reference.c"
FLAGS="-std=c11 -O2 -Wall -Wextra -fopenmp -DJATTN_STATIC_DEFINE -DJATTN_BUILDING -DJATTN_CPU_HAVE_NEON
       -D_POSIX_C_SOURCE=200809L -I$SRC/include -I$SRC/src -I$SRC/src/internal -I$SRC/tests -I$SRC/kit"
objs=""
for f in $LIB; do
  o="$WORK/$(echo "$f" | tr / _).o"
  # shellcheck disable=SC2086
  $CC $FLAGS -c "$SRC/$f" -o "$o" || { echo "FAIL: cross-compiling $f"; exit 1; }
  objs="$objs $o"
done
status=0
for t in test_cpu_kernels test_cpu_exp test_cpu_threads test_parity test_backward test_masks test_row_factor; do
  # shellcheck disable=SC2086
  $CC $FLAGS "$SRC/tests/$t.c" $objs -lm -o "$WORK/$t" || { echo "FAIL: cross-compiling $t"; exit 1; }
done
for t in test_cpu_kernels test_cpu_exp test_cpu_threads; do
  "$QEMU" -L "$SYSROOT" "$WORK/$t" > "$WORK/$t.log" 2>&1
  rc=$?
  grep -v '^ok' "$WORK/$t.log"
  [ $rc = 0 ] || status=1
done
# The portable twin is already checked natively; under qemu the parity suite runs the NEON path.
echo "== test_parity cpu, JATTN_CPU_ISA=neon (quick shapes)"
JATTN_CPU_ISA=neon JATTN_TEST_QUICK=1 "$QEMU" -L "$SYSROOT" "$WORK/test_parity" cpu > "$WORK/parity_neon.log" 2>&1
rc=$?
grep -v '^ok' "$WORK/parity_neon.log"
[ $rc = 0 ] || status=1
echo "== test_backward cpu gate, JATTN_CPU_ISA=neon"
JATTN_CPU_ISA=neon "$QEMU" -L "$SYSROOT" "$WORK/test_backward" cpu gate > "$WORK/backward_neon.log" 2>&1
rc=$?
grep -v '^ok' "$WORK/backward_neon.log"
[ $rc = 0 ] || status=1
echo "== test_masks cpu parity and test_backward cpu masks, JATTN_CPU_ISA=neon"
JATTN_CPU_ISA=neon "$QEMU" -L "$SYSROOT" "$WORK/test_masks" cpu parity > "$WORK/masks_neon.log" 2>&1
rc=$?
grep -v '^ok' "$WORK/masks_neon.log"
[ $rc = 0 ] || status=1
JATTN_CPU_ISA=neon "$QEMU" -L "$SYSROOT" "$WORK/test_backward" cpu masks > "$WORK/backward_masks_neon.log" 2>&1
rc=$?
grep -v '^ok' "$WORK/backward_masks_neon.log" | grep -v '^note'
[ $rc = 0 ] || status=1
echo "== test_row_factor cpu, JATTN_CPU_ISA=neon"
JATTN_CPU_ISA=neon "$QEMU" -L "$SYSROOT" "$WORK/test_row_factor" cpu > "$WORK/row_factor_neon.log" 2>&1
rc=$?
grep -v '^ok' "$WORK/row_factor_neon.log"
[ $rc = 0 ] || status=1
exit $status
