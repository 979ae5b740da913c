#!/usr/bin/env bash
# Issue 36's second GPU call for the backward v4 (src/cuda/backward_v4_sm90_fa3_f16x2.cu, AUTO's backward on
# sm_90 since the backward v2 left src/): the library's build and battery, then the second round's choices side
# by side (lab/gpu/backward_v4_tune.cu, one process per variant), then the times beside the forward and PyTorch.
# One H100 or H200, from the repository root, one call of about 6 minutes:
#   OUT=$OUT bash lab/gpu/backward_v4_run.sh
# Steps, each under its own cap (seconds in brackets; optional steps start only while the call is under LIMIT,
# default 300 s):
#   build  cmake (CUDA, JATTN_CUDA_ARCHS=90a) in $BUILD of jattn (the command), jattn_static, test_backward and
#          test_cuda_kernels,
#          and beside it the variants' program (nvcc, linked against $BUILD/libjattn.a) [200]
#   probe  one small backward (AUTO: v4) (25 s cap): a hang skips the steps that run v4
#   test   in parallel processes, AUTO (v4 where it takes the call, v3 the rest): tests/test_backward cuda, parts
#          gate, chain, floor, padding (v3 runs it), properties, determinism, device, graph, tf32, validation, and
#          fewq (issue 37's few-query `large` rows); gate, floor,
#          device and fewq a second time (fresh seeds: more draws of issue 37's case, B=1 H=2 Sq=1 Skv=200 D=128
#          flux dlse `large`, a shape of the gate part, judged by the floor rule; the variants' program draws it
#          too); jattn run --backward --check at (1,2,1536,128), (1,2,4608,128), D = 64, cross
#          attention, 24 heads at 1536 and (24,2000x1500,64) (where the library splits the units: cut items), and
#          tf32 (judged against the tf32 gate, rel_l2 <= 1e-3: the command's own pass judges every backward
#          against the f32 gate); test_cuda_kernels backward (small calls on device pointers, caller workspace
#          and pool, key padding to v3) [110 for the lot]
#   tune   each variant (r1 sk ov ov+sk dq dq+sk fix fix+sk lib: lab/gpu/backward_v4_tune.cu's header) in its own
#          process: the float64 checks at small shapes, then (1,24,1536/4608/16384,128), (1,24,4608,64) and
#          (1,24,4608,128) tf32: the median ms, the difference from the backward v3, repeat bits, bit hashes [60 each]
#   time   jattn's forward (AUTO: v6) and the library's backward (AUTO) at the same shapes, `jattn run --json`
#          (CUDA events, median of --reps); PyTorch's fp32 SDPA backward and forward (bench/gpu/torch_sdpa_backward.py)
#   sanitize (optional) compute-sanitizer memcheck, racecheck and synccheck on the variants' program's small
#          cases with the library's choices (cut items, the deferred dQ, a single query), memcheck on a small
#          library call and racecheck on test_cuda_kernels backward, in parallel [75]
#   ncu    (optional) Nsight Compute on the main kernel of the library's backward at (1,24,4608,128) [45]
# Logs under $OUT; the table last (also $OUT/table.txt): per shape every variant's ms, x the forward, PyTorch / it,
# and the checks (the bit-equal groups: ov, dq = r1 and ov+sk, dq+sk = sk in every gradient, fix's and fix+sk's
# dk, dv likewise, lib = dq or dq+sk as its schedule says).
set -u
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-/tmp/jattn-v4}
LIMIT=${LIMIT:-300}
mkdir -p "$OUT"
ROOT=$PWD
SECONDS=0
export CUBLAS_WORKSPACE_CONFIG=:4096:8
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
TUNE=$BUILD/v4tune
SHAPES="1,24,1536,128 1,24,4608,128 1,24,16384,128 1,24,4608,64 1,24,4608,128,tf32"
VARIANTS="r1 sk ov ov+sk dq dq+sk fix fix+sk lib"
step() { echo "== $* (${SECONDS} s)"; }
{
  step nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
  git -C "$ROOT" log --oneline -1 2>/dev/null
} > "$OUT/smi.txt" 2>&1

# ---- build ----
{
  step build
  timeout 200 bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a \
      -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > /dev/null &&
    cmake --build '$BUILD' -j 16 --target jattn jattn_static test_backward test_cuda_kernels" &
  bpid=$!
  # the variants' program: compiled while the library builds, linked after
  timeout 200 "$NVCC" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -DJATTN_STATIC_DEFINE -I"$ROOT/include" \
    -I"$ROOT/src/cuda" -Xptxas -v -c "$ROOT/lab/gpu/backward_v4_tune.cu" -o "$BUILD-tune.o" > "$OUT/tune_ptxas.log" 2>&1
  echo "tune compile rc $?"
  wait $bpid
  echo "library build rc $? after ${SECONDS} s"
  timeout 60 "$NVCC" -gencode arch=compute_90a,code=sm_90a "$BUILD-tune.o" "$BUILD/libjattn.a" -Xcompiler -fopenmp \
    -lcudart -lm -ldl -lpthread -o "$TUNE"
  echo "tune link rc $? after ${SECONDS} s"
} > "$OUT/build.log" 2>&1
J=$BUILD/tools/jattn
T=$BUILD/tests/test_backward
K=$BUILD/tests/test_cuda_kernels
echo "build: $(grep -E 'rc' "$OUT/build.log" | tr '\n' ' ')"
grep -E "spill|C75" "$OUT/tune_ptxas.log" | sort | uniq -c > "$OUT/tune_spills.txt" 2>/dev/null

# ---- probe: does the backward finish? ----
V4_OK=1
if [ -x "$J" ]; then
  {
    step probe
    timeout 25 $J run --backward --backend cuda --heads 2 --seq 300 --seq-kv 200 --reps 1 --check --json
    rc=$?; echo "rc $rc"
    [ $rc -eq 124 ] && echo "V4 HANGS: its tests, variants and times skipped"
  } > "$OUT/probe.log" 2>&1
  grep -q "V4 HANGS" "$OUT/probe.log" && V4_OK=0
fi
echo "probe: $(grep -E '^rc|HANGS' "$OUT/probe.log" 2>/dev/null | tr '\n' ' ')"

# ---- test ----
if [ -x "$T" ] && [ -x "$J" ] && [ $V4_OK -eq 1 ]; then
  pids=""
  bg() { local name=$1; shift; (timeout 110 "$@" > "$OUT/t_$name.log" 2>&1; echo "rc $?" >> "$OUT/t_$name.log") & pids="$pids $!"; }
  parts="gate chain floor padding properties determinism device graph tf32 validation"
  grep -q '"fewq"' "$ROOT/tests/test_backward.c" && parts="$parts fewq"
  for part in $parts; do bg "$part" "$T" cuda "$part"; done
  for part in gate floor device; do bg "${part}2" "$T" cuda "$part"; done
  grep -q '"fewq"' "$ROOT/tests/test_backward.c" && bg fewq2 "$T" cuda fewq
  [ -x "$K" ] && bg kernels "$K" backward
  # 24 heads at 1536 and (24,2000x1500,64): over 132 items, where the library splits the units (cut items)
  bg check "bash" -c "for a in '--heads 2 --seq 1536' '--heads 2 --seq 4608' '--heads 2 --seq 4608 --dim 64' \
      '--heads 2 --seq 1000 --seq-kv 777' '--heads 2 --seq 333 --seq-kv 4000 --dim 64' '--heads 24 --seq 1536' \
      '--heads 24 --seq 2000 --seq-kv 1500 --dim 64' '--heads 2 --seq 1536 --precision tf32' \
      '--heads 2 --seq 4608 --precision tf32'; do
    timeout 40 $J run --backward --backend cuda \$a --reps 1 --check --json; echo \"rc \$?\"; done"
  wait $pids
fi
echo "tests done at ${SECONDS} s"

# ---- tune: every variant in its own process ----
if [ -x "$TUNE" ] && [ $V4_OK -eq 1 ]; then
  mkdir -p "$BUILD-ref"
  for v in $VARIANTS; do
    { step "variant $v"; V4_TUNE=$v V4_REF_CACHE=$BUILD-ref timeout 60 "$TUNE" --small $SHAPES; echo "rc $?"; } \
      >> "$OUT/tune.log" 2>&1
  done
fi
echo "variants done at ${SECONDS} s"

# ---- time: the forward, the library's backward, PyTorch ----
if [ -x "$J" ]; then
  {
    for sh in $SHAPES; do
      IFS=, read -r b h s d prec <<< "$sh"
      prec=${prec:-f32}
      r=20; [ "$s" -gt 2000 ] && r=10; [ "$s" -gt 8192 ] && r=5
      step "$sh"
      echo "TAG forward"; timeout 20 $J run --backend cuda --batch $b --heads $h --seq $s --dim $d --precision $prec --reps $r --no-check --json; echo "rc $?"
      [ $V4_OK -eq 1 ] && { echo "TAG backward"; timeout 40 $J run --backward --backend cuda --batch $b --heads $h --seq $s --dim $d --precision $prec --reps $r --no-check --json; echo "rc $?"; }
    done
  } > "$OUT/bench.log" 2>&1
  { step torch; timeout 100 python3 "$ROOT/bench/gpu/torch_sdpa_backward.py" 1,24,1536,128 1,24,4608,128 1,24,16384,128 1,24,4608,64; echo "rc $?"; } > "$OUT/torch.log" 2>&1
fi
echo "times done at ${SECONDS} s"

# ---- compute-sanitizer (optional: started while the call is under LIMIT - 60 s) ----
if [ -x "$J" ] && [ $V4_OK -eq 1 ] && [ "$SECONDS" -lt $((LIMIT - 60)) ]; then
  pids=""
  bg() { local name=$1; shift; (timeout 75 "$@" > "$OUT/t_$name.log" 2>&1; echo "rc $?" >> "$OUT/t_$name.log") & pids="$pids $!"; }
  if [ -x "$TUNE" ]; then
    for tool in memcheck racecheck synccheck; do
      bg $tool env V4_TUNE=lib V4_REF_CACHE=$BUILD-ref "$SAN" --tool $tool --error-exitcode 3 "$TUNE" --small
    done
  fi
  bg memcheck_lib "$SAN" --tool memcheck --error-exitcode 3 "$J" run --backward --backend cuda --heads 2 --seq 130 \
    --seq-kv 77 --dim 128 --reps 1 --check
  [ -x "$K" ] && bg racecheck_kernels "$SAN" --tool racecheck --error-exitcode 3 "$K" backward
  wait $pids
fi
echo "sanitizers done at ${SECONDS} s"

# ---- ncu (optional) ----
if [ -x "$J" ] && [ $V4_OK -eq 1 ] && [ "$SECONDS" -lt "$LIMIT" ]; then
  {
    step ncu
    timeout 45 "$NCU" --clock-control none --kernel-name regex:bwd_v4_kernel --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      $J run --backward --backend cuda --seq 4608 --reps 1 --no-check 2>&1 | grep -v "^==PROF==" > "$OUT/ncu_full.txt"
    echo "rc ${PIPESTATUS[0]}"
  } > "$OUT/ncu.log" 2>&1
fi

# ---- the table (always) ----
python3 "$ROOT/lab/gpu/backward_v4_table.py" "$OUT" > "$OUT/table.txt" 2>&1
cat "$OUT/table.txt"
