#!/usr/bin/env bash
# The first GPU call of the float64 small-head_dim kernel (lab/gpu/pending/v1_small_head_dim_f64.patch,
# issue 37's follow-up: v1 below head_dim 8 faster than PyTorch and still exact). From the repository root on
# the device, with the patch applied to the working tree first (`git apply lab/gpu/pending/...patch`), nothing
# carried:
#   bash lab/gpu/v1_small_head_dim_run.sh            (about 4 minutes on an H100 with the build)
# Steps: build the library and the suites for sm_90a; the forward's share of the chain floor at head_dim 1, 4, 7
# (lab/gpu/d1_chain_floor.c, 100 draws each); `test_backward cuda chain` 6 runs; the forward suites with AUTO and
# v1 forced (test_masks all, test_edges, test_parity, test_cuda_device, test_backward gate / masks); compute-sanitizer
# memcheck, racecheck, initcheck and synccheck on test_cuda_kernels' forward with v1 forced (its head_dim-3 and
# masked head_dim-5 shapes run the new kernel); the forward against PyTorch's fp32 SDPA at (1,24,4608,1..8), AUTO
# and v7 forced (lab/gpu/small_head_dim_time.py). Logs under $OUT/log (default /tmp/v1small), a table last.
# With lab/gpu/pending/v4_dkv_parts_slices.patch applied too (issue 36's small shapes: the backward v4's cut items'
# dK, dV sum in 8 blocks per item), the script also runs test_backward cuda all, memcheck and racecheck on
# test_cuda_kernels' backward with v4 forced, and ncu's duration of every backward kernel at (1,24,256,64) and
# (1,24,1536,128) (`jattn run --backward`; before the patch bwd_v4_dkv_parts took ~19 us at (1,24,256,64) beside the
# fused kernel's 22 in torch.profiler, bench/results/h100-2026-12-06-d1chain/).
# With lab/gpu/pending/v4_gqa.patch applied too (after the parts patch; issue 35: grouped heads on the backward
# v4), it also runs test_cuda_kernels' masked cases (grouped heads with and without causal among them) with v4
# forced, alone and under memcheck and racecheck, test_backward cuda masks with v4 forced, and times the backward
# at (1,32 q / 8 kv,4608,128), MHA (1,32,4608,128), MQA (1,24 / 1,4608,128) and grouped causal, v4 and v3 forced.
# lab/gpu/pending_run.sh applies every pending patch that applies, then runs this script.
set -u
SECONDS=0
OUT=${OUT:-/tmp/v1small}; L=$OUT/log; B=${BUILD:-/tmp/jattn-v1small}; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF \
  -DJATTN_VULKAN=OFF > "$L/build.txt" 2>&1 &&
  cmake --build "$B" -j "$(nproc)" --target jattn_shared test_masks test_edges test_parity test_cuda_device \
    test_backward test_cuda_kernels jattn >> "$L/build.txt" 2>&1 || { tail -20 "$L/build.txt"; exit 1; }
echo "build done after $SECONDS s"
T=$B/tests; LIB=$(dirname "$(find "$B" -name 'libjattn.so.*' | head -1)"); export LD_LIBRARY_PATH=$LIB
gcc -O2 -std=c11 lab/gpu/d1_chain_floor.c -Itests -Ikit -Iinclude "$T/libjattn_test_harness.a" "$B/kit/libjattn_kit.a" \
  -L"$LIB" -ljattn -lm -o "$L/d1_chain_floor"
echo "== the forward's share of the chain floor (100 draws at (1,1,100,77,D))"
for d in 1 4 7; do "$L/d1_chain_floor" 100 cuda $d > "$L/floor-$d.txt"; tail -4 "$L/floor-$d.txt" | head -2; done
echo "== test_backward cuda chain, 6 runs"
fails=0; for i in $(seq 6); do timeout 60 "$T/test_backward" cuda chain > "$L/chain-$i.txt" 2>&1 || fails=$((fails + 1)); done
echo "chain: $fails / 6 runs failed"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck initcheck synccheck; do
  JATTN_CUDA_KERNEL=1 timeout 150 "$SAN" --tool $tool --error-exitcode 3 --print-limit 10 "$T/test_cuda_kernels" forward \
    > "$L/san-$tool.txt" 2>&1 &
done
SUITES=("test_masks cuda all" "test_edges cuda" "test_parity cuda" "test_cuda_device" "test_backward cuda gate" \
  "test_backward cuda masks")
for t in "${SUITES[@]}"; do
  n=${t// /-}; timeout 150 $T/$t > "$L/$n.txt" 2>&1 &
  JATTN_CUDA_KERNEL=1 timeout 150 $T/$t > "$L/$n-v1.txt" 2>&1 &
done
wait
PARTS=0; grep -q kPartsSlices src/cuda/backward_v4_sm90_fa3_f16x2.cu && PARTS=1
if [ $PARTS = 1 ]; then
  echo "== the v4 parts patch: test_backward cuda all, sanitizers on the backward v4, ncu durations"
  timeout 200 "$T/test_backward" cuda all > "$L/bwd-all.txt" 2>&1; tail -1 "$L/bwd-all.txt"
  for tool in memcheck racecheck; do
    JATTN_CUDA_BWD_KERNEL=v4 timeout 200 "$SAN" --tool $tool --error-exitcode 3 --print-limit 10 \
      "$T/test_cuda_kernels" backward > "$L/san-bwd-$tool.txt" 2>&1
    echo "bwd $tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$L/san-bwd-$tool.txt" | tail -1)"
  done
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for shape in "--heads 24 --seq 256 --dim 64" "--heads 24 --seq 1536 --dim 128"; do
    timeout 120 "$NCU" --kernel-name regex:bwd_v4 --metrics gpu__time_duration.sum "$B/tools/jattn" run --backend cuda \
      --backward $shape --reps 3 --no-check > "$L/ncu-${shape// /}.txt" 2>&1
    echo "$shape: $(grep -E "bwd_v4|gpu__time_duration" "$L/ncu-${shape// /}.txt" | tail -8 | tr -s ' ' | tr '\n' ' ')"
  done
fi
if grep -q bwd_v4_group_sum src/cuda/backward_v4_sm90_fa3_f16x2.cu; then
  echo "== the v4 grouped-heads patch: the masked kernel cases with v4 forced (and sanitized), the time against MHA and v3"
  JATTN_CUDA_BWD_KERNEL=v4 timeout 200 "$T/test_cuda_kernels" masks > "$L/kernels-masks-v4.txt" 2>&1
  tail -1 "$L/kernels-masks-v4.txt"
  for tool in memcheck racecheck; do
    JATTN_CUDA_BWD_KERNEL=v4 timeout 300 "$SAN" --tool $tool --error-exitcode 3 --print-limit 10 \
      "$T/test_cuda_kernels" masks > "$L/san-masks-$tool.txt" 2>&1
    echo "masks $tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$L/san-masks-$tool.txt" | tail -1)"
  done
  JATTN_CUDA_BWD_KERNEL=v4 timeout 200 "$T/test_backward" cuda masks > "$L/bwd-masks-v4.txt" 2>&1
  tail -1 "$L/bwd-masks-v4.txt"
  for cfg in "--heads 32 --kv-heads 8" "--heads 32" "--heads 24 --kv-heads 1" "--heads 32 --kv-heads 8 --causal"; do
    for k in v4 v3; do
      r=$(JATTN_CUDA_BWD_KERNEL=$k timeout 60 "$B/tools/jattn" run --backend cuda --backward $cfg --seq 4608 --dim 128 \
        --no-check --json 2>&1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(d.get('ms'), d.get('kernel', ''))" 2>&1)
      echo "backward (1,${cfg},4608,128) $k: $r ms" | tee -a "$L/gqa-time.txt"
    done
  done
fi
echo "== the forward against SDPA"
PKG=$(mktemp -d); cp -r python/src/jattn "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$LIB"/libjattn.so.0.* "$PKG/jattn/_lib/libjattn.so"
cc -Iinclude tests/abi/jattn_abi_probe.c -o "$PKG/abi_probe" && "$PKG/abi_probe" > "$PKG/jattn/_lib/abi_probe.txt"
PYTHONPATH=$PKG timeout 90 python3 lab/gpu/small_head_dim_time.py --dims 1,2,4,7,8 --reps 9 | tee "$L/time-auto.txt"
PYTHONPATH=$PKG JATTN_CUDA_KERNEL=7 timeout 60 python3 lab/gpu/small_head_dim_time.py --dims 1,4,7 --reps 9 | tee "$L/time-v7.txt"
echo "== table (after $SECONDS s)"
for f in "$L"/san-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tail -1) | $(tail -1 "$f")"
done
for t in "${SUITES[@]}"; do n=${t// /-}; echo "$n: $(tail -1 "$L/$n.txt") | v1 forced: $(tail -1 "$L/$n-v1.txt")"; done
echo "chain: $fails / 6 runs failed"
