#!/bin/sh
# "No behaviour change" check of the cpu backend: bench/cpu/output_hashes.c built against two
# libjattn builds (each a CMake build dir holding libjattn.so), run on every instruction set
# this CPU has (JATTN_CPU_ISA) and on 1, 2, 3 and 5 threads; the two sets of lines are diffed.
#
# usage: sh bench/cpu/hash_compare.sh BUILD_BEFORE BUILD_AFTER [ISAS] [THREADS]
#   ISAS default "avx512 avx2 generic" (those the CPU lacks are reported and skipped),
#   THREADS default 1,2,3,5. Exit 0 when every line is equal, 1 when one differs.
set -eu
A=${1:?build dir before}
B=${2:?build dir after}
ISAS=${3:-avx512 avx2 generic}
THREADS=${4:-1,2,3,5}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for side in A B; do
  eval dir=\$$side
  dir=$(cd "$dir" && pwd)
  cc -O2 -std=c11 -I"$SRC/include" "$SRC/bench/cpu/output_hashes.c" -L"$dir" -Wl,-rpath,"$dir" -ljattn -lm \
    -o "$WORK/hash_$side"
done
status=0
for isa in $ISAS; do
  for side in A B; do
    JATTN_CPU_ISA=$isa "$WORK/hash_$side" "$THREADS" > "$WORK/$side.$isa" 2> "$WORK/$side.$isa.err" || true
  done
  if [ ! -s "$WORK/A.$isa" ]; then
    echo "$isa: skipped ($(head -1 "$WORK/A.$isa.err"))"
    continue
  fi
  n=$(wc -l < "$WORK/A.$isa")
  if cmp -s "$WORK/A.$isa" "$WORK/B.$isa" && [ ! -s "$WORK/B.$isa.err" ]; then
    echo "$isa: $n lines equal"
  else
    echo "$isa: DIFFERENT"
    diff "$WORK/A.$isa" "$WORK/B.$isa" | head -20 || true
    status=1
  fi
done
exit $status
