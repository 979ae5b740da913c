#!/usr/bin/env bash
# The backward v2's GPU call (issue 22: backward_v2_sm90_f16x2.cu): built here, carried, run there in one call.
#   on the development machine:  CARRY=/work/main/.carry-bwdwg lab/gpu/backward_carry.sh
#   on the GPU machine, from the carried folder:  OUT=$OUT bash backward_v2_run.sh
# Steps, each under its own timeout (seconds in brackets): test_backward cuda with v2 forced
# (JATTN_CUDA_BWD_KERNEL=v2) [TEST_S, 120], then with each of VARIANTS (name:environment; none since
# issue 32 removed the chain and exp knobs) [30 each]; compute-sanitizer memcheck and racecheck on small calls
# v2 takes [25 each]; times at (1,24,S,128), S in SEQS (1536 4608 16384): v2, v1 (when V1 is set;
# S < 8192), jattn's forward; v2 and the forward at (1,24,4608,64) [8-20 each]; PyTorch's fp32 SDPA
# backward [80]; ncu's time of each kernel at (1,24,4608,128) [20]; the table last.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export JATTN_CUDA_BWD_KERNEL=v2 # v1 where asked for below
J=./bin/jattn
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step() { echo "== $* ($(date -u +%T))"; }
# (issue 32: the variants' knobs left src; none left to run)
VARIANTS="${VARIANTS:-}"
{
  step nvidia-smi; nvidia-smi -L
  step JATTN_CUDA_BWD_KERNEL=v2 test_backward cuda all
  JATTN_CUDA_BWD_KERNEL=v2 timeout "${TEST_S:-120}" ./bin/test_backward cuda all; echo "rc $?"
} > "$OUT/test.log" 2>&1
{
  for v in $VARIANTS; do
    step "${v%%:*}: test_backward cuda all"
    env $(echo "${v#*:}" | tr , ' ') timeout 30 ./bin/test_backward cuda all | grep -v "^ok" | tail -12; echo "rc ${PIPESTATUS[0]}"
  done
} > "$OUT/test_chains.log" 2>&1
{
  step memcheck
  timeout 25 "$SAN" --tool memcheck --error-exitcode 3 $J run --backward --backend cuda --heads 2 --seq 130 --seq-kv 77 --dim 128 --reps 1; echo "rc $?"
  step racecheck
  timeout 25 "$SAN" --tool racecheck --error-exitcode 3 $J run --backward --backend cuda --heads 1 --seq 200 --seq-kv 140 --dim 64 --reps 1; echo "rc $?"
} > "$OUT/sanitize.log" 2>&1
{
  for s in ${SEQS:-1536 4608 16384}; do
    r=10; [ "$s" -gt 8192 ] && r=4
    step "v2 / v1 / forward at $s"
    echo "TAG v2"; timeout 20 $J run --backward --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
    for v in $VARIANTS; do
      [ "$s" -gt 8192 ] && case $v in c33:*|c31:*|fe:*) continue ;; esac
      echo "TAG v2-${v%%:*}"
      env $(echo "${v#*:}" | tr , ' ') timeout 20 $J run --backward --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
    done
    if [ -n "${V1:-}" ] && [ "$s" -lt 8192 ]; then
      echo "TAG v1"
      JATTN_CUDA_BWD_KERNEL=v1 timeout 15 $J run --backward --backend cuda --seq $s --reps 3 --no-check --json; echo "rc $?"
    fi
    echo "TAG forward"; timeout 10 $J run --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
  done
  step v2 and forward at D = 64
  echo "TAG v2"; timeout 10 $J run --backward --backend cuda --seq 4608 --dim 64 --reps 10 --no-check --json; echo "rc $?"
  echo "TAG forward"; timeout 8 $J run --backend cuda --seq 4608 --dim 64 --reps 10 --no-check --json; echo "rc $?"
} > "$OUT/bench.log" 2>&1
{
  step torch
  timeout 80 python3 torch_sdpa_backward.py 1,24,1536,128 1,24,4608,128 1,24,16384,128; echo "rc $?"
} > "$OUT/torch.log" 2>&1
{
  step ncu
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for v in "v2:"; do
    echo "TAG ${v%%:*}"
    env ${v#*:} timeout 20 "$NCU" --clock-control none --kernel-name regex:bwd_ --metrics gpu__time_duration.sum \
      $J run --backward --backend cuda --seq 4608 --reps 1 --no-check 2>&1 | grep -v PROF | grep -E "bwd_|gpu__time_duration" | head -8
    echo "rc ${PIPESTATUS[0]}"
  done
} > "$OUT/ncu.log" 2>&1
python3 - "$OUT" > "$OUT/table.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
tag = "?"
for line in open(f"{out}/bench.log"):
    if line.startswith("TAG "):
        tag = line.split()[1]
    if line.startswith("{"):
        j = json.loads(line)
        rows.setdefault((j["seq_q"], j["dim"]), {})[tag] = j["ms"]
        print(tag, j.get("kernel"), j["seq_q"], j["dim"], j["ms"])
for line in open(f"{out}/torch.log"):
    if line.startswith("RESULT"):
        f = line.split()
        rows.setdefault((int(f[4]), int(f[5])), {})["torch " + f[1]] = float(f[6])
print("ms at (1,24,S,D), H200; TFLOP/s of a backward = 10 B H S^2 D / time")
for key in sorted(rows):
    r = rows[key]
    s, d = key
    fl = 10 * 24 * s * s * d
    print(f"S={s} D={d}: " + ", ".join(f"{k} {v:.3f} ms ({fl / v / 1e9:.1f} TF/s)" if "forward" not in k else f"{k} {v:.3f} ms" for k, v in sorted(r.items())))
    v2 = r.get("v2")
    if v2:
        t = r.get("torch backward-default")
        f = r.get("forward")
        print(f"   v2 vs torch default: {t / v2:.2f}x" if t else "", f" v2 / forward: {v2 / f:.2f}" if f else "")
PY
cat "$OUT/table.txt"; tail -5 "$OUT/test.log"; grep -E "rc |ERROR SUMMARY" "$OUT/sanitize.log"
