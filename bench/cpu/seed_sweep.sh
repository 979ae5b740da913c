#!/bin/bash
# Runs a test N times, each on a fresh random seed (JATTN_TEST_SEED), and counts the runs whose
# last line does not say " 0 failed"; prints each failing run's seed and FAIL lines, then a total.
# The rare-draw hunt of the accuracy tests (bench/results/cpu-2026-12-04-bwd-tails.md).
# usage: bench/cpu/seed_sweep.sh N TEST [ARGS...]   e.g. 400 build/tests/test_backward cpu gate
N=$1; shift
fails=0
for i in $(seq 1 $N); do
  s=$(( (RANDOM<<30) ^ (RANDOM<<15) ^ RANDOM ^ (i<<40) ))
  out=$(JATTN_TEST_SEED=$s "$@" 2>&1)
  if ! echo "$out" | tail -1 | grep -q " 0 failed"; then fails=$((fails+1)); echo "$out" | grep "FAIL\|seed " | head -4; fi
done
echo "SWEEP $*: $fails / $N failed"
