#!/usr/bin/env bash
# The cuda backward v3 with masks and grouped-query heads (issue 35) on one H100 or H200, in one call of under
# four minutes, from the repository root:
#
#   OUT=$OUT bash bench/gpu/masks_backward_run.sh
#
# Steps, each under its own time cap (build 110 s, checks 45 s, timings 35 + 15 + 30 s: at most 235 s in all):
#   build    cmake (JATTN_CUDA=ON, JATTN_CUDA_ARCHS=90a, Release, ptxas -v) in $BUILD of test_backward,
#            test_cuda_kernels and masks_backward_bench; the masked instances' registers and spills
#            (ptxas.txt)
#   checks   at once: test_backward cuda masks (AUTO: the masked calls run the backward v3; and with v3
#            forced), test_cuda_kernels masks under compute-sanitizer memcheck and racecheck (the masked
#            backward's pre-pass and kernels on small calls with every mask part, device-resident, a graph
#            replay bit for bit; its gradients against the ref backward)
#   timings  alone on the GPU: masks_backward_bench (device-resident, CUDA events, median of 15) on the
#            cases below, AUTO, and the unmasked ones again with the backward v3 forced; PyTorch's fp32
#            SDPA backward on the same cases (is_causal, enable_gqa, attn_mask)
#   table    the statuses, then the table last (masks_backward_table.py): each case beside the same shape
#            unmasked (v3 and AUTO) and beside PyTorch
# Writes under $OUT (default /tmp/masks_backward): build.log, ptxas.txt, one log per check, auto.txt, v3.txt,
# torch.txt, table.txt, status.txt. Knobs: BUILD, CASES, REPS, CAP_BUILD, CAP_CHECKS, CAP_TIMINGS.
#
# What it should print: every check PASS (test_backward's masks part: "N passed, 0 failed" with no case skipped
# for the backward; compute-sanitizer "ERROR SUMMARY: 0 errors" and "0 hazards"), then the table: causal at
# Sq = Skv at most 0.55x the same shape unmasked on v3 (the emulation's walk does 0.50-0.54 of its tiles),
# grouped-query heads about 1.0x per attended pair, and each case beside PyTorch.
set -u
OUT=${OUT:-/tmp/masks_backward}
BUILD=${BUILD:-/tmp/jattn-masks-bwd}
CAP_BUILD=${CAP_BUILD:-110}
CAP_CHECKS=${CAP_CHECKS:-45}
CAP_TIMINGS=${CAP_TIMINGS:-35}
REPS=${REPS:-15}
CASES=${CASES:-"1,24,24,1536,128:none 1,24,24,1536,128:causal 1,24,8,1536,128:none 1,24,8,1536,128:causal \
1,24,24,1536,128:blocks=6 1,24,24,1536,128:segments=4 1,24,24,1536,128:bias \
1,24,24,4608,128:none 1,24,24,4608,128:causal 1,24,4,4608,128:none 1,24,1,4608,128:causal \
1,24,24,4608,128:blocks=8 1,24,24,4608,128:segments=3+kvlen 1,24,24,4608,128:bias+causal \
1,24,24,1024,128,4608:causal-br 1,16,16,4096,64:none 1,16,16,4096,64:causal 1,16,16,4096,72:none \
1,16,16,4096,72:causal"}
ROOT=$PWD
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.txt
SECONDS=0
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
status() { echo "$1" | tee -a "$OUT/status.txt"; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1)"
  echo "nvcc: $(nvcc --version 2> /dev/null | tail -1)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2> /dev/null || echo none)"
} | tee "$OUT/status.txt"

# ---- build ----
timeout -k 10 "$CAP_BUILD" bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON \
    -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF -DCMAKE_CUDA_FLAGS='-Xptxas -v' &&
  cmake --build '$BUILD' -j $(nproc) --target test_backward test_cuda_kernels masks_backward_bench" \
  > "$OUT/build.log" 2>&1
rc=$?
status "build: rc $rc after ${SECONDS} s"
# the masked instances of the backward v3 (bwd_v3_kernel<Dp, BR, role, true>), their registers and spills
awk '/Compiling entry function .*bwd_v3/ {name = $0} /Function properties for .*bwd_v3/ {getline; stack = $0}
     /Used [0-9]+ registers/ && name != "" {print name; print "   " stack; print "   " $0; name = ""}' \
  "$OUT/build.log" | sed 's/ptxas info *: //' > "$OUT/ptxas.txt"
T=$BUILD/tests
B=$BUILD/bench
if [ ! -x "$T/test_backward" ] || [ ! -x "$T/test_cuda_kernels" ] || [ ! -x "$B/masks_backward_bench" ]; then
  status "BUILD FAILED"
  grep -E "error" "$OUT/build.log" | head -20
  exit 1
fi

# ---- checks, at once ----
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
pids=""
check() { # NAME COMMAND...
  local name=$1
  shift
  (timeout -k 5 "$CAP_CHECKS" "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc") &
  pids="$pids $!"
}
check test_backward_masks_auto "$T/test_backward" cuda masks
check test_backward_masks_v3 env JATTN_CUDA_BWD_KERNEL=v3 "$T/test_backward" cuda masks
if [ -x "$SAN" ]; then
  for tool in memcheck racecheck; do
    check "sanitizer_$tool" "$SAN" --tool "$tool" --error-exitcode 3 --print-limit 30 "$T/test_cuda_kernels" masks
  done
else
  check test_cuda_kernels_masks "$T/test_cuda_kernels" masks
fi
for p in $pids; do wait "$p"; done
for f in "$OUT"/*.rc; do
  name=$(basename "$f" .rc)
  rc=$(cat "$f")
  verdict=PASS
  [ "$rc" != 0 ] && verdict=FAIL
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && verdict=TIMEOUT
  line=$(grep -E "passed|ERROR SUMMARY|RACECHECK SUMMARY|SKIP" "$OUT/$name.log" | tail -2 | tr '\n' ' ')
  status "$verdict $name (rc $rc): $line"
  [ "$verdict" != PASS ] && grep -E "^FAIL|=========" "$OUT/$name.log" | head -10
done
grep -h "^skip" "$OUT"/test_backward_masks_*.log | head -5
status "checks done after ${SECONDS} s"

# ---- timings, alone ----
# shellcheck disable=SC2086
timeout -k 5 "$CAP_TIMINGS" "$B/masks_backward_bench" --reps "$REPS" $CASES > "$OUT/auto.txt" 2>&1
status "timings AUTO: rc $? after ${SECONDS} s"
NONE=$(for c in $CASES; do case $c in *:none) echo "$c" ;; esac; done)
# shellcheck disable=SC2086
JATTN_CUDA_BWD_KERNEL=v3 timeout -k 5 15 "$B/masks_backward_bench" --reps "$REPS" $NONE > "$OUT/v3.txt" 2>&1
status "timings v3 unmasked: rc $? after ${SECONDS} s"
if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
  # shellcheck disable=SC2086
  timeout -k 5 30 python3 "$ROOT/bench/gpu/torch_sdpa_masks_backward.py" --reps 8 $CASES > "$OUT/torch.txt" 2>&1
  status "timings PyTorch: rc $? after ${SECONDS} s"
else
  status "SKIP PyTorch: no torch with CUDA"
fi
grep -h "^FAIL" "$OUT/auto.txt" "$OUT/v3.txt" "$OUT/torch.txt" 2> /dev/null | head -10

# ---- the table, last ----
python3 "$ROOT/bench/gpu/masks_backward_table.py" "$OUT" > "$OUT/table.txt" 2>&1
echo "total ${SECONDS} s"
cat "$OUT/table.txt"
