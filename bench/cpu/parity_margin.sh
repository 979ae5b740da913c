#!/bin/sh
# How close the cpu backend comes to the f32 gate (docs/DESIGN.md §2): runs the parity suite RUNS
# times with fresh seeds for one instruction set and prints, per input distribution, the worst
# fraction of the gate reached (max of rel_l2 / 2e-6 and max_abs / (1e-5 max(1, max|ref|)))
# and the case that reached it. A fraction >= 1 is a failure.
#
# usage (repository root): sh bench/cpu/parity_margin.sh BUILD_DIR [ISA] [RUNS]
#   ISA   avx512 | avx2 | neon | generic (default: the CPU's best)     RUNS  default 10
set -u
BUILD=${1:?usage: sh bench/cpu/parity_margin.sh BUILD_DIR [ISA] [RUNS]}
ISA=${2:-}
RUNS=${3:-10}
[ -n "$ISA" ] && export JATTN_CPU_ISA="$ISA"
i=0
while [ "$i" -lt "$RUNS" ]; do
  JATTN_TEST_VERBOSE=1 "$BUILD/tests/test_parity" cpu
  i=$((i + 1))
done | awk -v isa="${ISA:-best}" -v runs="$RUNS" '
  /^(ok|FAIL) / && / f32: / {
    dist = $0; sub(/.* dist=/, "", dist); sub(/ .*/, "", dist)
    rel = $0; sub(/.* rel_l2 /, "", rel); sub(/ .*/, "", rel)
    mab = $0; sub(/.* max_abs /, "", mab); sub(/ .*/, "", mab)
    ref = $0; sub(/.*max\|ref\| /, "", ref); sub(/\).*/, "", ref)
    # JATTN_GATE_F32_REL_L2 and JATTN_GATE_F32_MAX_ABS of kit/metrics.h
    f = rel / 2e-6; g = mab / (1e-5 * (ref > 1 ? ref : 1)); if (g > f) f = g
    if (f > worst[dist]) { worst[dist] = f; at[dist] = $0 }
    n[dist]++; if ($1 == "FAIL") fails++
  }
  END {
    printf "isa %s, %d runs: %d failures\n", isa, runs, fails
    for (d in worst) printf "  %-8s %5d cases, worst %.3f of the gate: %s\n", d, n[d], worst[d], at[d]
  }'
