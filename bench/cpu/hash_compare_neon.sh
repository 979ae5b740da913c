#!/bin/sh
# hash_compare.sh for the NEON kernels: bench/cpu/output_hashes.c and the cpu backend of two
# source trees cross-compiled for aarch64 (as tests/test_cpu_neon_qemu.sh does) and run under
# qemu-aarch64 with JATTN_CPU_ISA=neon, then generic; the two sets of lines are diffed.
#
# usage: sh bench/cpu/hash_compare_neon.sh SOURCE_BEFORE SOURCE_AFTER [THREADS]
# exit 77 when the cross compiler or qemu-aarch64 is absent (apt-get install gcc-aarch64-linux-gnu
# qemu-user), 0 when every line is equal, 1 when one differs.
set -eu
A=$(cd "${1:?source tree before}" && pwd)
B=$(cd "${2:?source tree after}" && pwd)
THREADS=${3:-1,2,3}
CC=${JATTN_AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${JATTN_QEMU_AARCH64:-qemu-aarch64}
SYSROOT=${JATTN_AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
command -v "$CC" >/dev/null 2>&1 || { echo "SKIP: no $CC"; exit 77; }
command -v "$QEMU" >/dev/null 2>&1 || { echo "SKIP: no $QEMU"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LIB="src/jattn.c src/mask.c src/plan.c src/validate.c src/threads.c src/reference.c src/cuda/cuda_unavailable.c src/vulkan/vk_unavailable.c
     src/cpu/cpu_backend.c src/cpu/cpu_isa.c src/cpu/cpu_key_blocks.c src/cpu/cpu_kernels_generic.c
     src/cpu/cpu_kernels_neon.c"
for side in A B; do
  eval src=\$$side
  mkdir -p "$WORK/$side"
  objs=""
  for f in $LIB; do
    o="$WORK/$side/$(echo "$f" | tr / _).o"
    $CC -std=c11 -O2 -fopenmp -DJATTN_STATIC_DEFINE -DJATTN_BUILDING -DJATTN_CPU_HAVE_NEON -D_POSIX_C_SOURCE=200809L \
      -I"$src/include" -I"$src/src" -c "$src/$f" -o "$o"
    objs="$objs $o"
  done
  # shellcheck disable=SC2086
  $CC -std=c11 -O2 -fopenmp -DJATTN_STATIC_DEFINE -I"$src/include" "$HERE/output_hashes.c" $objs -lm \
    -o "$WORK/hash_$side"
done
status=0
for isa in neon generic; do
  for side in A B; do
    JATTN_CPU_ISA=$isa "$QEMU" -L "$SYSROOT" "$WORK/hash_$side" "$THREADS" > "$WORK/$side.$isa" 2>&1 || true
  done
  n=$(grep -c "^case.*_${isa}_" "$WORK/A.$isa" || true)
  if [ "$n" -eq 0 ]; then
    echo "$isa (aarch64, qemu): no result"; head -3 "$WORK/A.$isa"; status=1; continue
  fi
  if cmp -s "$WORK/A.$isa" "$WORK/B.$isa"; then
    echo "$isa (aarch64, qemu): $n lines equal"
  else
    echo "$isa (aarch64, qemu): DIFFERENT"
    diff "$WORK/A.$isa" "$WORK/B.$isa" | head -20 || true
    status=1
  fi
done
exit $status
