#!/bin/sh
# The forward of one or more jattn builds and PyTorch's CPU SDPA forward timed in turn on one
# shape (jattn A, [jattn B,] torch, repeated ROUNDS times: the shared machine drifts, so only
# figures taken side by side compare). Each entry prints its in-process median ms of REPS; the
# summary gives the medians and, per round, torch ms / jattn ms.
# usage: sh bench/cpu/fwd_vs_torch.sh ROUNDS THREADS H S REPS JATTN [JATTN2]
# env:   PY (the python with torch; default python3)
set -u
rounds=$1 threads=$2 H=$3 S=$4 reps=$5
shift 5
PY=${PY:-python3}
here=$(dirname "$0")
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) threads=$threads H=$H S=$S D=128 reps=$reps"
i=0
while [ $i -lt "$rounds" ]; do
  n=0
  for bin in "$@"; do
    ms=$("$bin" run --backend cpu --threads "$threads" --heads "$H" --seq "$S" --reps "$reps" --no-check --json |
      "$PY" -c "import sys,json; print(json.loads(sys.stdin.read())['ms'])")
    echo "jattn$n $ms"
    n=$((n + 1))
  done
  ms=$("$PY" "$here/torch_cpu_sdpa.py" "$H" 128 "$reps" "$threads" "$S" |
    "$PY" -c "import sys,json; print(json.loads(sys.stdin.read())['ms'])")
  echo "torch $ms"
  i=$((i + 1))
done | tee /dev/stderr | "$PY" -c "
import statistics, sys
v = {}
for line in sys.stdin:
    k, ms = line.split(); v.setdefault(k, []).append(float(ms))
flops = 4.0 * $H * $S * $S * 128
for k in sorted(v):
    m = statistics.median(v[k])
    extra = ''
    if k != 'torch':
        r = [t / j for t, j in zip(v['torch'], v[k])]
        extra = '  torch/jattn per round ' + ' '.join('%.2f' % x for x in r) + '  median %.2fx' % statistics.median(r)
    print('%-6s median %.1f ms  %.1f GFLOP/s%s' % (k, m, flops / m / 1e6, extra))"
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
