#!/usr/bin/env bash
# Kernel v6 on the GPU machine, one call (issue 23): build bench/gpu/v6_check (unless BIN names a
# built one), then correctness on odd shapes (D 128 and 64), the single-row peaky tail (1000
# draws, v6 and v4), correctness + timing at the benchmark shapes (v6, v4, the
# pre-pass), PyTorch fp32 SDPA, compute-sanitizer (memcheck, synccheck, racecheck) on small
# shapes, ncu on v6 at (1,24,4608,128); the summary last. Logs under OUT (default /tmp/v6out).
# Measured with it: bench/results/h200-2026-12-01-v6/.
# usage: lab/gpu/v6_run.sh        (from anywhere; BIN=path/to/v6_check to skip the build)
set -u -o pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/v6out}
mkdir -p "$O"
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  BIN=/tmp/v6_check
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Iinclude -Isrc/cuda -Xcompiler -fopenmp -Xptxas -v \
    lab/gpu/v6_check.cu src/cuda/attention_v6_sm90_fa3_f16x2.cu src/cuda/attention_v6_split_kv_f16x2.cu \
    src/cuda/attention_v4_sm90_f16x2.cu src/cuda/attention_v4_split_kv_f16x2.cu \
    src/cuda/sm90_contract.c -o "$BIN" > "$O/build.log" 2>&1 || { echo "BUILD FAILED"; tail -20 "$O/build.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$O/smi.txt"
timeout 60 "$BIN" --check-only --no-v4 --rows 48 1,2,200,333,128 1,1,1,1,128 1,3,65,7,128 2,3,777,777,128 \
  1,4,1000,1000,128 1,2,300,513,128 1,2,4096,512,128 1,2,200,333,64 1,1,1,1,64 1,3,65,7,64 2,3,777,777,64 \
  1,2,4096,512,64 > "$O/small.txt" 2>&1; echo "small rc $?"
timeout 40 "$BIN" --tail 1000 > "$O/tail.txt" 2>&1; echo "tail rc $?"; grep tail "$O/tail.txt"
timeout 170 "$BIN" --rows 64 --reps 20 1,24,1536,128 1,24,4608,128 1,48,4608,128 1,24,16384,128 1,40,32768,128 \
  1,24,1536,64 1,24,4608,64 > "$O/main.txt" 2>&1; echo "main rc $?"
timeout 60 python3 bench/gpu/torch_sdpa_peer.py 1,24,1536,128 1,24,4608,128 1,48,4608,128 1,24,16384,128 1,24,1536,64 \
  1,24,4608,64 > "$O/torch.txt" 2>&1
for t in memcheck synccheck racecheck; do
  timeout 25 compute-sanitizer --tool $t "$BIN" --check-only --no-v4 --no-probe --rows 4 1,2,200,333,128 1,2,130,77,64 \
    > "$O/san_$t.txt" 2>&1
  echo "$t rc $? $(grep 'ERROR SUMMARY' "$O/san_$t.txt")"
done
timeout 100 ncu --clock-control none -k regex:fa3_f16x2_128x64_kernel -c 1 --set full --import-source no --page details \
  "$BIN" --no-v4 --no-probe --time-only --reps 1 1,24,4608,128 > "$O/ncu.txt" 2>&1; echo "ncu rc $?"
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|Registers Per|\
Achieved Occupancy|Shared Memory|Tensor|L1/TEX Cache Throughput" "$O/ncu.txt" | head -24
echo "==== summary"
echo "small: $(grep -c 'PASS' "$O/small.txt") PASS, $(grep -c 'FAIL\|NOT BIT' "$O/small.txt") FAIL"
grep -E "FAIL|NOT BIT" "$O/small.txt" | head -6
grep -E "^probe" "$O/main.txt"; grep -E "FAIL|NOT BIT" "$O/main.txt" | head -6; grep -E "^time" "$O/main.txt"
grep RESULT "$O/torch.txt" | grep f32
sed -n '/^| shape/,$p' "$O/main.txt"
