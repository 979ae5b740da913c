#!/bin/sh
# Two builds of the jattn command timed alternately on one shape (the machine drifts: only
# pairs taken side by side compare). Prints each build's median GFLOP/s over ROUNDS pairs and
# the values.
# usage: sh lab/cpu/ab.sh OLD_JATTN NEW_JATTN ROUNDS THREADS [jattn run options...]
# e.g.   sh lab/cpu/ab.sh /tmp/old/build/tools/jattn build/tools/jattn 6 1 --seq 4096 --seq-kv 77
set -u
old=$1 new=$2 rounds=$3 threads=$4
shift 4
i=0
while [ $i -lt "$rounds" ]; do
  for which in old new; do
    [ $which = old ] && bin=$old || bin=$new
    g=$("$bin" run --backend cpu --threads "$threads" "$@" --reps 5 --no-check --json |
      python3 -c "import sys,json; print(round(json.loads(sys.stdin.read())['gflops'],1))")
    echo "$which $g"
  done
  i=$((i + 1))
done | python3 -c "
import statistics, sys
v = {}
for line in sys.stdin:
    k, g = line.split(); v.setdefault(k, []).append(float(g))
for k in ('old', 'new'):
    print(k, 'median %.1f' % statistics.median(v[k]), ' ', ' '.join('%.1f' % g for g in v[k]))"
