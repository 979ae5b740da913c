#!/usr/bin/env bash
# Issue 36's first GPU call for the backward v4 (src/cuda/backward_v4_sm90_fa3_f16x2.cu, the fused sm_90a kernel in
# FlashAttention-3's orientation): build, correctness first, then times; one H100 or H200, from the repository
# root, in one call of about 7 minutes:
#   OUT=$OUT bash bench/gpu/backward_v4_run.sh
# Steps, each under its own cap (seconds in brackets; the whole call stops starting optional steps past LIMIT,
# default 380 s):
#   build  cmake (CUDA, JATTN_CUDA_ARCHS=90a) in $BUILD of jattn (the command), jattn_shared, test_backward, and the
#          microbenchmark bench/gpu/backward_v4_mix.cu with nvcc beside it [170]
#   probe  one small v4 call (25 s cap): a hang skips v4's tests, times and ncu (the baselines still run)
#   mix    the design note's "measure first": the wgmma mix of v4 alone on every SM (its waits; one wait per m-block;
#          with the dQ pushes as red.v2 into per-CTA copies (the kernel's), into 5 regions shared by all CTAs (a
#          head's accumulator in L2), and as 32 red.u64 (order-free fixed point)) [25]
#   test   in parallel processes, JATTN_CUDA_BWD_KERNEL=v4: tests/test_backward cuda, parts gate, chain, floor,
#          padding (v4 refuses padding: v3 runs it), properties, determinism, device, graph, tf32, validation;
#          jattn run --backward --check at (1,2,1536,128), (1,2,4608,128), D = 64 and tf32; compute-sanitizer
#          memcheck, racecheck and synccheck on small v4 calls (D 128 and 64, partial tiles) [100 for the lot]
#   time   (1,24,S,128), S = 1536 / 4608 / 16384: v4, v2, jattn's forward (AUTO: v6), each `jattn run --json`
#          (CUDA events, median of --reps); v4 tf32 and v4 / v2 / forward at D = 64 (S = 4608); PyTorch's fp32 SDPA
#          backward and forward (torch_sdpa_backward.py) [~150]
#   ncu    Nsight Compute on the main kernel of one v4 call at (1,24,4608,128): speed of light, pipe utilization,
#          warp states, scheduler (only when the call is still under LIMIT; full report $OUT/ncu_full.txt) [45]
# Logs under $OUT; the table last (also $OUT/table.txt).
set -u
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-/tmp/jattn-v4}
LIMIT=${LIMIT:-380}
mkdir -p "$OUT"
ROOT=$PWD
SECONDS=0
export CUBLAS_WORKSPACE_CONFIG=:4096:8
step() { echo "== $* (${SECONDS} s)"; }
{
  step nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
} > "$OUT/smi.txt" 2>&1

# ---- build ----
{
  step build
  timeout 170 bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a \
      -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > /dev/null &&
    cmake --build '$BUILD' -j 16 --target jattn jattn_shared test_backward" &
  bpid=$!
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  timeout 120 "$NVCC" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I"$ROOT/include" -I"$ROOT/src/cuda" \
    "$ROOT/bench/gpu/backward_v4_mix.cu" -o "$BUILD-mix"
  echo "mix build rc $?"
  wait $bpid
  echo "build rc $? after ${SECONDS} s"
} > "$OUT/build.log" 2>&1
J=$BUILD/tools/jattn
T=$BUILD/tests/test_backward
echo "build: $(tail -1 "$OUT/build.log")"

# ---- probe: does v4 finish? (a hang would otherwise cost every later step its whole cap) ----
V4_OK=1
if [ -x "$J" ]; then
  {
    step probe
    JATTN_CUDA_BWD_KERNEL=v4 timeout 25 $J run --backward --backend cuda --heads 2 --seq 300 --seq-kv 200 --reps 1 --check --json
    rc=$?; echo "rc $rc"
    [ $rc -eq 124 ] && echo "V4 HANGS: v4's tests and times skipped"
  } > "$OUT/probe.log" 2>&1
  grep -q "V4 HANGS" "$OUT/probe.log" && V4_OK=0
fi
echo "probe: $(grep -E '^rc|HANGS' "$OUT/probe.log" 2>/dev/null | tr '\n' ' ')"

# ---- mix ----
if [ -x "$BUILD-mix" ]; then
  { step mix; timeout 25 "$BUILD-mix"; echo "rc $?"; } > "$OUT/mix.log" 2>&1
fi

# ---- test ----
if [ -x "$T" ] && [ -x "$J" ] && [ $V4_OK -eq 1 ]; then
  export JATTN_CUDA_BWD_KERNEL=v4
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  pids=""
  bg() { local name=$1; shift; (timeout 100 "$@" > "$OUT/t_$name.log" 2>&1; echo "rc $?" >> "$OUT/t_$name.log") & pids="$pids $!"; }
  for part in gate chain floor padding properties determinism device graph tf32 validation; do
    bg "$part" "$T" cuda "$part"
  done
  bg check "bash" -c "for a in '--seq 1536' '--seq 4608' '--seq 4608 --dim 64' '--seq 1536 --precision tf32' \
      '--seq 1000 --seq-kv 777' '--seq 333 --seq-kv 4000 --dim 64'; do
    timeout 40 $J run --backward --backend cuda --heads 2 \$a --reps 1 --check --json; echo \"rc \$?\"; done"
  bg memcheck "$SAN" --tool memcheck --error-exitcode 3 "$J" run --backward --backend cuda --heads 2 --seq 130 \
    --seq-kv 77 --dim 128 --reps 1 --check
  bg racecheck "$SAN" --tool racecheck --error-exitcode 3 "$J" run --backward --backend cuda --heads 1 --seq 200 \
    --seq-kv 140 --dim 64 --reps 1 --check
  bg synccheck "$SAN" --tool synccheck --error-exitcode 3 "$J" run --backward --backend cuda --heads 1 --seq 100 \
    --seq-kv 300 --dim 128 --reps 1 --check
  wait $pids
  unset JATTN_CUDA_BWD_KERNEL
fi
echo "tests done at ${SECONDS} s"

# ---- time ----
if [ -x "$J" ]; then
  {
    for s in 1536 4608 16384; do
      r=20; [ "$s" -gt 2000 ] && r=10; [ "$s" -gt 8192 ] && r=5
      step "S = $s"
      if [ $V4_OK -eq 1 ]; then
        echo "TAG v4"; JATTN_CUDA_BWD_KERNEL=v4 timeout 40 $J run --backward --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
      fi
      echo "TAG v2"; JATTN_CUDA_BWD_KERNEL=v2 timeout 40 $J run --backward --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
      echo "TAG forward"; timeout 20 $J run --backend cuda --seq $s --reps $r --no-check --json; echo "rc $?"
    done
    step "tf32 and D = 64"
    [ $V4_OK -eq 1 ] && { echo "TAG v4-tf32"; JATTN_CUDA_BWD_KERNEL=v4 timeout 20 $J run --backward --backend cuda --seq 4608 --precision tf32 --reps 10 --no-check --json; echo "rc $?"; }
    echo "TAG forward-tf32"; timeout 20 $J run --backend cuda --seq 4608 --precision tf32 --reps 10 --no-check --json; echo "rc $?"
    [ $V4_OK -eq 1 ] && { echo "TAG v4"; JATTN_CUDA_BWD_KERNEL=v4 timeout 20 $J run --backward --backend cuda --seq 4608 --dim 64 --reps 10 --no-check --json; echo "rc $?"; }
    echo "TAG v2"; JATTN_CUDA_BWD_KERNEL=v2 timeout 20 $J run --backward --backend cuda --seq 4608 --dim 64 --reps 10 --no-check --json; echo "rc $?"
    echo "TAG forward"; timeout 20 $J run --backend cuda --seq 4608 --dim 64 --reps 10 --no-check --json; echo "rc $?"
  } > "$OUT/bench.log" 2>&1
  { step torch; timeout 100 python3 "$ROOT/bench/gpu/torch_sdpa_backward.py" 1,24,1536,128 1,24,4608,128 1,24,16384,128 1,24,4608,64; echo "rc $?"; } > "$OUT/torch.log" 2>&1
fi
echo "times done at ${SECONDS} s"

# ---- ncu (optional) ----
if [ -x "$J" ] && [ $V4_OK -eq 1 ] && [ "$SECONDS" -lt "$LIMIT" ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  {
    step ncu
    echo "-- durations of each kernel of one v4 call"
    JATTN_CUDA_BWD_KERNEL=v4 timeout 30 "$NCU" --clock-control none --kernel-name regex:bwd_ --metrics gpu__time_duration.sum \
      $J run --backward --backend cuda --seq 4608 --reps 1 --no-check 2>&1 | grep -E "bwd_|gpu__time_duration" | head -12
    JATTN_CUDA_BWD_KERNEL=v4 timeout 45 "$NCU" --clock-control none --kernel-name regex:bwd_v4_kernel --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      $J run --backward --backend cuda --seq 4608 --reps 1 --no-check 2>&1 | grep -v "^==PROF==" > "$OUT/ncu_full.txt"
    echo "rc ${PIPESTATUS[0]}"
  } > "$OUT/ncu.log" 2>&1
fi

# ---- the table (always) ----
python3 - "$OUT" > "$OUT/table.txt" 2>&1 <<'PY'
import json, os, re, sys
out = sys.argv[1]
def lines(name):
    try:
        return open(os.path.join(out, name), errors="replace").read().splitlines()
    except OSError:
        return []
print("== backward v4, first call")
for l in lines("smi.txt")[1:2]:
    print("device:", l)
print("build:", (lines("build.log") or ["(no log)"])[-1])
for l in lines("probe.log"):
    if l.startswith("{"):
        try:
            j = json.loads(l)
            print(f"probe (2,300x200,128) {j.get('kernel')}: pass={j.get('pass')} dq/dk/dv rel_l2 "
                  f"{j.get('dq_rel_l2', 0):.3g} {j.get('dk_rel_l2', 0):.3g} {j.get('dv_rel_l2', 0):.3g}")
        except ValueError:
            pass
    elif "HANGS" in l or "rror" in l:
        print("probe:", l[:200])
for l in lines("mix.log"):
    if l.startswith("MIX") or "error" in l.lower():
        print(l)
print("-- correctness (JATTN_CUDA_BWD_KERNEL=v4)")
tp = tf = 0
for part in ["gate", "chain", "floor", "padding", "properties", "determinism", "device", "graph", "tf32", "validation"]:
    ls = lines(f"t_{part}.log")
    tally = [l for l in ls if re.search(r"\d+ passed, \d+ failed", l)]
    kern = [l for l in ls if l.startswith("backward on")]
    fails = [l for l in ls if l.startswith("FAIL")]
    rc = [l for l in ls if l.startswith("rc ")]
    if tally:
        m = re.search(r"(\d+) passed, (\d+) failed", tally[-1])
        tp += int(m.group(1)); tf += int(m.group(2))
    print(f"{part:12s} {tally[-1] if tally else '(no tally) ' + (rc[-1] if rc else '')}"
          + (f"  [{kern[0][12:]}]" if kern and part == "gate" else ""))
    for l in fails[:3]:
        print("   ", l[:200])
print(f"test_backward parts: {tp} passed, {tf} failed")
for l in lines("t_check.log"):
    if l.startswith("{"):
        try:
            j = json.loads(l)
        except ValueError:
            continue
        rel = " ".join(f"{k[:-7]} {j[k]:.3g}" for k in j if k.endswith("_rel_l2"))
        print(f"check S={j['seq_q']}x{j['seq_kv']} D={j['dim']} {j['kernel']}: pass={j.get('pass')} rel_l2 {rel}")
for t in ("memcheck", "racecheck", "synccheck"):
    ls = lines(f"t_{t}.log")
    summ = [l for l in ls if "ERROR SUMMARY" in l or "RACECHECK SUMMARY" in l]
    rc = [l for l in ls if l.startswith("rc ")]
    print(f"{t}: {summ[-1].strip() if summ else '(no summary)'} {rc[-1] if rc else ''}")
print("-- times (ms, median; TFLOP/s of a backward = 10 B H S^2 D / t)")
rows, kern = {}, {}
tag = "?"
for l in lines("bench.log"):
    if l.startswith("TAG "):
        tag = l.split()[1]
    elif l.startswith("{"):
        try:
            j = json.loads(l)
        except ValueError:
            continue
        rows.setdefault((j["seq_q"], j["dim"]), {})[tag] = j["ms"]
        kern[(j["seq_q"], j["dim"], tag)] = j.get("kernel")
for l in lines("torch.log"):
    if l.startswith("RESULT"):
        f = l.split()
        rows.setdefault((int(f[4]), int(f[5])), {})["torch-" + f[1]] = float(f[6])
print(f"{'S':>6} {'D':>4} {'v4':>8} {'v2':>8} {'fwd':>8} {'torch':>8} | {'v4/fwd':>6} {'v2/fwd':>6} {'torch/v4':>8} {'v4 TF/s':>7} | v4 tf32")
for (s, d) in sorted(rows):
    r = rows[(s, d)]
    v4, v2, fw, tb = r.get("v4"), r.get("v2"), r.get("forward"), r.get("torch-backward-default")
    f = lambda x: f"{x:8.3f}" if x else f"{'-':>8}"
    g = lambda a, b: f"{a / b:6.2f}" if a and b else f"{'-':>6}"
    fl = 10 * 24 * s * s * d
    tf = r.get("v4-tf32")
    print(f"{s:6d} {d:4d} {f(v4)} {f(v2)} {f(fw)} {f(tb)} | {g(v4, fw)} {g(v2, fw)} {g(tb, v4):>8} "
          f"{(fl / v4 / 1e9 if v4 else 0):7.1f} | {f(tf)}" + (f" (fwd tf32 {r['forward-tf32']:.3f})" if r.get('forward-tf32') else ""))
ks = sorted(set(v for k, v in kern.items() if k[2].startswith("v4")))
print("v4 rows ran:", ", ".join(str(k) for k in ks) or "-")
print("targets (issue 36): v4/fwd <= 3.5 (aim 3.0), torch/v4 >= 3.5")
dur, name = [], None
for l in lines("ncu.log"):
    m = re.search(r"(bwd_\w+?)[<(]", l)
    if m:
        name = m.group(1)
    m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", l)
    if m and name:
        dur.append(f"{name} {m.group(2)} {m.group(1)}")
if dur:
    print("ncu durations at (1,24,4608,128):", "; ".join(dur))
for l in lines("ncu_full.txt"):
    if re.search(r"bwd_v4|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Tensor|Shared|Warp Cycles Per Issued|Eligible Warps", l):
        print("ncu:", " ".join(l.split())[:150])
PY
cat "$OUT/table.txt"
