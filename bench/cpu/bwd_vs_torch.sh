#!/bin/sh
# `jattn bench --backward` of one or more jattn builds on one shape, taken in turn ROUNDS times
# (the shared machine drifts: only figures taken side by side compare). Each call times the
# jattn backward, the FMA peak and PyTorch's CPU SDPA backward (JATTN_BENCH_PYTHON) in the same
# process run; the summary gives per build the medians of ms, % of the FMA peak and torch/jattn.
# usage: sh bench/cpu/bwd_vs_torch.sh ROUNDS THREADS H S REPS JATTN [JATTN2 ...]
set -u
rounds=$1 threads=$2 H=$3 S=$4 reps=$5
shift 5
PY=${JATTN_BENCH_PYTHON:-python3}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) threads=$threads H=$H S=$S D=128 reps=$reps"
i=0
while [ $i -lt "$rounds" ]; do
  n=0
  for bin in "$@"; do
    echo "jattn$n $("$bin" bench --backward --backend cpu --threads "$threads" --heads "$H" --seq "$S" --reps "$reps" --json)"
    n=$((n + 1))
  done
  i=$((i + 1))
done | tee /dev/stderr | "$PY" -c "
import statistics as st, sys, json
v = {}
for line in sys.stdin:
    k, js = line.split(' ', 1); v.setdefault(k, []).append(json.loads(js))
for k in sorted(v):
    r = v[k]; med = lambda f: st.median(f(x) for x in r)
    print('%s: jattn %.1f ms (%.1f GFLOP/s, %.0f%% of FMA peak %.1f), torch %.1f ms (%.1f GFLOP/s, %.0f%% of peak), torch/jattn %s median %.2fx' % (
        k, med(lambda x: x['ms']), med(lambda x: x['gflops']), med(lambda x: 100 * x['gflops'] / x['fma_peak_gflops']),
        med(lambda x: x['fma_peak_gflops']), med(lambda x: x['torch_ms']), med(lambda x: x['gflops'] * x['ms'] / x['torch_ms']),
        med(lambda x: 100 * x['gflops'] * x['ms'] / x['torch_ms'] / x['fma_peak_gflops']),
        ' '.join('%.2f' % x['vs_torch'] for x in r), med(lambda x: x['vs_torch'])))"
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
