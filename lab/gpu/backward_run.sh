#!/usr/bin/env bash
# The cuda backward's GPU call (issue 22): built here, carried, run there in one call.
#   on the development machine:  lab/gpu/backward_carry.sh   (builds, fills .carry-cudabwd/)
#   on the GPU machine, from the carried folder:  OUT=$OUT bash backward_run.sh
# Steps, each under its own timeout (seconds in brackets): test_backward cuda (the battery with
# host pointers, device pointers, graph capture, determinism, tf32) [150]; jattn bench --backward
# --backend cuda (f32, beside PyTorch's fp32 SDPA backward) [50]; jattn's tf32 backward and
# forward times [4 x 15, 8]; PyTorch default, deterministic and forward [90]; the table;
# compute-sanitizer memcheck, racecheck, synccheck and initcheck over a small jattn run --backward [30 each]; ncu's
# time of each backward kernel [40].
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
J=./bin/jattn
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step() { echo "== $* ($(date -u +%T))"; }
{
  step nvidia-smi; nvidia-smi -L; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  step test_backward cuda all
  timeout 150 ./bin/test_backward cuda all; echo "rc $?"
} > "$OUT/test.log" 2>&1
{
  step jattn bench --backward --backend cuda f32
  timeout 50 $J bench --backward --backend cuda; echo "rc $?"
  step jattn tf32 backward, forwards
  for s in 1536 4608; do
    timeout 15 $J run --backward --backend cuda --precision tf32 --seq $s --no-check --json; echo "rc $?"
    timeout 8 $J run --backend cuda --seq $s --no-check --json; echo "rc $?"
  done
  step jattn f32 backward and forward at 16384
  timeout 40 $J run --backward --backend cuda --seq 16384 --reps 3 --no-check --json; echo "rc $?"
  timeout 10 $J run --backend cuda --seq 16384 --no-check --json; echo "rc $?"
} > "$OUT/bench.log" 2>&1
{
  step torch
  timeout 90 python3 torch_sdpa_backward.py 1,24,1536,128 1,24,4608,128 1,24,16384,128; echo "rc $?"
} > "$OUT/torch.log" 2>&1
python3 - "$OUT" > "$OUT/table.txt" 2>&1 <<'PY'
import json, re, sys
out = sys.argv[1]
rows = {}
for line in open(f"{out}/bench.log"):
    m = re.match(r"cuda\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", line)
    if m:
        rows.setdefault(int(m[3]), {})["jattn f32 bwd"] = float(m[5])
    if line.startswith("{"):
        j = json.loads(line)
        if j.get("pass_kind") != "backward":
            key = "jattn f32 fwd"
        else:
            key = "jattn tf32 bwd" if j["kernel"].endswith("grads_tf32") else "jattn f32 bwd"
        rows.setdefault(j["seq_q"], {})[key] = j["ms"]
for line in open(f"{out}/torch.log"):
    if line.startswith("RESULT"):
        f = line.split()
        rows.setdefault(int(f[4]), {})["torch " + f[1]] = float(f[6])
cols = ["jattn f32 bwd", "jattn tf32 bwd", "jattn f32 fwd", "torch forward", "torch backward-default",
        "torch backward-deterministic"]
print("ms at (1,24,S,128), H200; ratios: torch / jattn f32 backward")
print("S     " + " | ".join(cols) + " | vs torch default | vs torch det. | bwd/fwd")
for s in sorted(rows):
    r = rows[s]
    g = lambda c: r.get(c, float("nan"))
    print(f"{s:5d} " + " | ".join(f"{g(c):.3f}" for c in cols) +
          f" | {g('torch backward-default') / g('jattn f32 bwd'):.2f}x | {g('torch backward-deterministic') / g('jattn f32 bwd'):.2f}x"
          f" | {g('jattn f32 bwd') / g('jattn f32 fwd'):.2f}")
PY
cat "$OUT/table.txt"
{
  step memcheck
  timeout 30 "$SAN" --tool memcheck --error-exitcode 3 $J run --backward --backend cuda --heads 2 --seq 130 --seq-kv 77 --dim 80 --reps 1; echo "rc $?"
  step racecheck
  timeout 30 "$SAN" --tool racecheck --error-exitcode 3 $J run --backward --backend cuda --heads 1 --seq 96 --dim 128 --reps 1; echo "rc $?"
  step synccheck
  timeout 30 "$SAN" --tool synccheck --error-exitcode 3 $J run --backward --backend cuda --heads 1 --seq 96 --seq-kv 70 --dim 128 --reps 1; echo "rc $?"
  step initcheck
  timeout 30 "$SAN" --tool initcheck --error-exitcode 3 $J run --backward --backend cuda --heads 2 --seq 130 --seq-kv 77 --dim 80 --reps 1; echo "rc $?"
} > "$OUT/sanitize.log" 2>&1
# the time of each backward kernel at (1,24,1536,128), f32 (ncu, one metric, clocks left alone)
{
  step ncu
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 40 "$NCU" --clock-control none --kernel-name regex:bwd_ --metrics gpu__time_duration.sum \
    $J run --backward --backend cuda --seq 1536 --reps 1 --no-check 2>&1 | grep -E "bwd_|gpu__time_duration" | head -20
  echo "rc ${PIPESTATUS[0]}"
} > "$OUT/ncu.log" 2>&1
tail -4 "$OUT/test.log"; grep -E "rc |ERROR SUMMARY" "$OUT/sanitize.log"
