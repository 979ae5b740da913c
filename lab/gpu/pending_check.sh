#!/usr/bin/env bash
# The pending GPU patches checked in stages that fit the device's 600-second calls (2026-12-07), from the repository
# root on the device, nothing carried:
#   bash lab/gpu/pending_check.sh                      apply, build, test, time   (one call, about 6 minutes)
#   bash lab/gpu/pending_check.sh sanitize             compute-sanitizer (a second call on the still-warm machine:
#                                                      the build stays in build-pending/, an ignored folder)
# Stages, in the order given (default: apply build test time):
#   apply     every patch of lab/gpu/pending/ in stacking order that applies (git apply, else patch -p1)
#   build     the library, the suites and the command for sm_90a into build-pending/
#   test      the backward battery (test_backward cuda all) under AUTO and with v4 forced, test_cuda_kernels all
#             under AUTO and with v4 forced (key padding and grouped heads on v4 among its masked cases), the
#             forward suites (test_masks cuda all, test_edges, test_parity, test_cuda_device) and v1 forced on
#             test_cuda_kernels forward (the float64 kernel below head_dim 8), test_backward cuda chain 3 times
#   time      the backward, v4 against v3 forced, at (1,24,4608,128), grouped heads 32 / 8 and MQA; ncu's duration of every backward
#             kernel at (1,24,256,64) (the parts sum); the forward below head_dim 8 against PyTorch
#   masks     bench/gpu/masks_backward_bench (AUTO, and v3 forced on the unmasked shapes) and PyTorch's fp32 SDPA
#             backward (torch_sdpa_masks_backward.py) on MASK_CASES: every part on v4 (the key bias since v4-bias), among
#             them 4 packed sequences of 1152 tokens beside the padded batch (4,24,1152,128) of the same tokens
#             (issue 35: as fast per FLOP), alone and with causal, and the windowed cases again with v3 forced (the
#             path they ran before); the table of masks_backward_table.py
#   py        host_cost.py on cuda (the package made from this build): forward and forward + backward through
#             jattn.attention beside SDPA at (1,24,256,64), (1,24,512,128), (1,24,1536,128), (1,24,4608,128)
#   windows   the backward v4 with windows (branch v4-windows: segments, blocks, key padding with causal, top-left
#             causal with seq_q < seq_kv through the device-side table of each key block's m-blocks): test_backward
#             cuda all and test_cuda_kernels all with v4 forced and under AUTO, their masks parts with v4 forced (the
#             kernels' line per masked case), test_cuda_ladder, the CPU emulation of the table
#             (emulate_backward_v4_windows.cc, where a g++ is found)
#   sanitize  memcheck and racecheck of test_cuda_kernels backward and masks with v4 forced (the windows' cases among
#             its masked ones), initcheck of its masks with v4 forced (a dQ copy or a cut item's part read where
#             nothing wrote it); memcheck, racecheck, initcheck and synccheck of test_cuda_kernels forward with v1
#             forced
# Logs under $OUT/log (default /tmp/pending), a table of each stage last; the logs also as $OUT/logs.tgz (a device call
# brings back a handful of files).
set -u
SECONDS=0
OUT=${OUT:-/tmp/pending}
L=$OUT/log
B=build-pending
mkdir -p "$L"
T=$B/tests
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
last() { tail -1 "$1" 2> /dev/null | cut -c1-160; }

stage_apply() {
  for p in v4_dkv_parts_slices v4_gqa v1_small_head_dim_f64 v4_key_padding; do
    f=lab/gpu/pending/$p.patch
    if [ ! -f "$f" ]; then echo "NOT applied: $p (no file)"; continue; fi
    if command -v git > /dev/null 2>&1 && git apply --check "$f" 2> /dev/null; then
      git apply "$f" && echo "applied $p"
    elif patch -p1 --dry-run -s < "$f" > /dev/null 2>&1; then
      patch -p1 -s < "$f" && echo "applied $p"
    else
      echo "NOT applied: $p"
    fi
  done
}

stage_build() {
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF \
    -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > "$L/build.txt" 2>&1 &&
    cmake --build "$B" -j "$(nproc)" --target jattn_shared test_masks test_edges test_parity test_cuda_device \
      test_backward test_cuda_kernels test_cuda_ladder jattn >> "$L/build.txt" 2>&1 || { tail -30 "$L/build.txt"; exit 1; }
  grep -E "bwd_v4_kernel|registers|spill" "$L/build.txt" | grep -B1 -A1 "bwd_v4_kernel" | tail -24 > "$L/ptxas.txt"
  echo "build done after $SECONDS s"
}

stage_test() {
  local runs=(
    "auto bwd-all::$T/test_backward cuda all"
    "v4 bwd-all:JATTN_CUDA_BWD_KERNEL=4:$T/test_backward cuda all"
    "auto kernels-all::$T/test_cuda_kernels all"
    "v4 kernels-all:JATTN_CUDA_BWD_KERNEL=4:$T/test_cuda_kernels all"
    "v1 kernels-fwd:JATTN_CUDA_KERNEL=1:$T/test_cuda_kernels forward"
    "masks::$T/test_masks cuda all"
    "edges::$T/test_edges cuda"
    "parity::$T/test_parity cuda"
    "device::$T/test_cuda_device"
  )
  for r in "${runs[@]}"; do
    local name=${r%%:*} rest=${r#*:}
    local envs=${rest%%:*} cmd=${rest#*:}
    (env $envs timeout 280 $cmd > "$L/test-${name// /-}.txt" 2>&1; echo "rc $?" >> "$L/test-${name// /-}.txt") &
  done
  wait
  local fails=0
  for i in 1 2 3; do timeout 60 "$T/test_backward" cuda chain > "$L/chain-$i.txt" 2>&1 || fails=$((fails + 1)); done
  echo "== test (after $SECONDS s)"
  for r in "${runs[@]}"; do
    local name=${r%%:*}
    local f="$L/test-${name// /-}.txt"
    echo "$name: $(grep -E "passed|PASS|FAIL" "$f" | tail -1 | cut -c1-120) | $(last "$f")"
  done
  echo "chain: $fails / 3 runs failed"
  grep -h "^FAIL" "$L"/test-*.txt | head -12
}

stage_windows() { # the backward v4 with windows: the batteries with v4 forced and under AUTO
  local runs=(
    "v4 bwd-all:JATTN_CUDA_BWD_KERNEL=4:$T/test_backward cuda all"
    "auto bwd-all::$T/test_backward cuda all"
    "v4 kernels-all:JATTN_CUDA_BWD_KERNEL=4:$T/test_cuda_kernels all"
    "auto kernels-all::$T/test_cuda_kernels all"
  )
  for r in "${runs[@]}"; do
    local name=${r%%:*} rest=${r#*:}
    local envs=${rest%%:*} cmd=${rest#*:}
    (env $envs timeout 280 $cmd > "$L/win-${name// /-}.txt" 2>&1; echo "rc $?" >> "$L/win-${name// /-}.txt") &
  done
  wait
  # the masked parts alone with v4 forced, every case's line (kernel, errors)
  JATTN_CUDA_BWD_KERNEL=4 JATTN_TEST_VERBOSE=1 timeout 200 "$T/test_cuda_kernels" masks > "$L/win-v4-kernels-masks.txt" 2>&1
  echo "rc $?" >> "$L/win-v4-kernels-masks.txt"
  JATTN_CUDA_BWD_KERNEL=4 timeout 200 "$T/test_backward" cuda masks > "$L/win-v4-bwd-masks.txt" 2>&1
  echo "rc $?" >> "$L/win-v4-bwd-masks.txt"
  timeout 120 "$T/test_cuda_ladder" src/cuda/NOTES.md > "$L/win-ladder.txt" 2>&1
  if command -v g++ > /dev/null 2>&1 && command -v gcc > /dev/null 2>&1; then
    gcc -O2 -c -Iinclude -Isrc src/mask.c -o "$B/mask_emul.o" &&
      g++ -O2 -std=c++17 -Iinclude -Isrc lab/gpu/emulate_backward_v4_windows.cc "$B/mask_emul.o" -o "$B/emulate_v4w" &&
      timeout 120 "$B/emulate_v4w" 2000 > "$L/win-emulate.txt" 2>&1
  fi
  echo "== windows (after $SECONDS s)"
  for f in "$L"/win-*.txt; do
    echo "$(basename "$f" .txt): $(grep -E "passed|PASS|FAIL|differ" "$f" | tail -1 | cut -c1-120) | $(last "$f")"
  done
  grep -h "^FAIL" "$L"/win-*.txt | head -12
  grep -h "backward masked" "$L/win-v4-kernels-masks.txt" | grep -c "cuda_bwd_v4" | sed 's/^/masked cases on v4: /'
}

PKG=""
# shellcheck source=lab/gpu/package_from_build.sh
. lab/gpu/package_from_build.sh
make_pkg() { # the Python package from this build, in $PKG (made once)
  [ -n "$PKG" ] && return 0
  PKG=$(mktemp -d)
  package_from_build "$B" "$PKG"
}

stage_py() { # host_cost.py on cuda: the small shapes and the FLUX shape through jattn.attention beside SDPA
  make_pkg || { echo "py: no package"; return; }
  PYTHONPATH=$PKG timeout 200 python3 bench/python/host_cost.py --device cuda \
    --shapes 1x24x256x64,1x24x512x128,1x24x1536x128,1x24x4608x128 --json "$L/host.jsonl" > "$L/host.md" 2>&1
  echo "== py (after $SECONDS s)"
  tail -14 "$L/host.md"
}

time_bwd() { # kernel, options...
  local k=$1
  shift
  JATTN_CUDA_BWD_KERNEL=$k timeout 90 "$B/tools/jattn" run --backend cuda --backward "$@" --no-check --json 2>&1 |
    python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('%.3f ms %s' % (d['ms'], d.get('kernel', '')))" 2>&1
}

stage_time() {
  echo "== the backward, v4 and v3 forced (medians of the command's repeats)" | tee "$L/time.txt"
  local cfgs=("--heads 24" "--heads 32 --kv-heads 8" "--heads 24 --kv-heads 1") # (--backward takes no key padding)
  for cfg in "${cfgs[@]}"; do
    for k in 4 3; do
      echo "(${cfg}, S 4608, D 128) v$k: $(time_bwd $k $cfg --seq 4608 --dim 128)" | tee -a "$L/time.txt"
    done
  done
  for shape in "--heads 24 --seq 256 --dim 64" "--heads 24 --seq 1536 --dim 128"; do
    timeout 120 "$NCU" --kernel-name regex:bwd_v4 --metrics gpu__time_duration.sum "$B/tools/jattn" run \
      --backend cuda --backward $shape --reps 3 --no-check > "$L/ncu-${shape// /}.txt" 2>&1
    echo "ncu $shape: $(grep -E "bwd_v4|gpu__time_duration" "$L/ncu-${shape// /}.txt" | tail -8 | tr -s ' ' | tr '\n' ' ')" |
      cut -c1-400 | tee -a "$L/time.txt"
  done
  if [ -f lab/gpu/small_head_dim_time.py ] && make_pkg; then
    PYTHONPATH=$PKG timeout 90 python3 lab/gpu/small_head_dim_time.py --dims 1,4,7,8 --reps 9 > "$L/time-small-d.txt" 2>&1
    tail -8 "$L/time-small-d.txt"
  fi
  echo "== time (after $SECONDS s)"
}

MASK_CASES=${MASK_CASES:-"2,24,24,4608,128:none 2,24,24,4608,128:kvlen 1,24,24,4608,128:none \
1,24,24,4608,128:causal 1,32,8,4608,128:none 1,32,8,4608,128:kvlen 1,32,8,4608,128:causal \
1,24,1,4608,128:none 1,24,24,1536,128:none 1,24,24,1536,128:causal 1,24,24,4608,128:segments=3+kvlen \
1,24,24,4608,128:bias+causal 4,24,24,1152,128:none 1,24,24,4608,128:segments=4 4,24,24,1152,128:causal \
1,24,24,4608,128:segments=4+causal 2,24,24,4608,128:kvlen+causal 1,24,24,4608,128:blocks=4 \
1,24,24,4608,128:segments=8 1,24,24,4608,128:bias 2,24,24,4608,128:bias+kvlen"}

stage_masks() {
  local M=$L/masks
  mkdir -p "$M"
  cmake --build "$B" -j "$(nproc)" --target masks_backward_bench >> "$L/build.txt" 2>&1 || { echo "masks: build failed"; return; }
  # shellcheck disable=SC2086
  timeout -k 5 60 "$B/bench/masks_backward_bench" --reps 15 $MASK_CASES > "$M/auto.txt" 2>&1
  local none
  none=$(for c in $MASK_CASES; do case $c in *:none) echo "$c" ;; esac; done)
  # shellcheck disable=SC2086
  JATTN_CUDA_BWD_KERNEL=v3 timeout -k 5 30 "$B/bench/masks_backward_bench" --reps 15 $none > "$M/v3.txt" 2>&1
  local win # the windows and the key bias v4 now takes, as v3 ran them (before the branches v4-windows, v4-bias)
  win=$(for c in $MASK_CASES; do case $c in *segments* | *blocks* | *kvlen+causal* | *causal+kvlen* | *bias*) echo "$c" ;; esac; done)
  # shellcheck disable=SC2086
  [ -n "$win" ] && JATTN_CUDA_BWD_KERNEL=v3 timeout -k 5 60 "$B/bench/masks_backward_bench" --reps 15 $win \
    > "$M/v3-windows.txt" 2>&1
  # shellcheck disable=SC2086
  timeout -k 5 60 python3 bench/gpu/torch_sdpa_masks_backward.py --reps 8 $MASK_CASES > "$M/torch.txt" 2>&1
  grep -h "^FAIL" "$M"/*.txt | head -6
  echo "== masks (after $SECONDS s)"
  python3 bench/gpu/masks_backward_table.py "$M" | tee "$M/table.txt"
}

stage_sanitize() {
  local jobs=(
    "bwd-memcheck:JATTN_CUDA_BWD_KERNEL=4:memcheck:backward"
    "bwd-racecheck:JATTN_CUDA_BWD_KERNEL=4:racecheck:backward"
    "masks-memcheck:JATTN_CUDA_BWD_KERNEL=4:memcheck:masks"
    "masks-racecheck:JATTN_CUDA_BWD_KERNEL=4:racecheck:masks"
    "masks-initcheck:JATTN_CUDA_BWD_KERNEL=4:initcheck:masks"
    "fwd-memcheck:JATTN_CUDA_KERNEL=1:memcheck:forward"
    "fwd-racecheck:JATTN_CUDA_KERNEL=1:racecheck:forward"
    "fwd-initcheck:JATTN_CUDA_KERNEL=1:initcheck:forward"
    "fwd-synccheck:JATTN_CUDA_KERNEL=1:synccheck:forward"
  )
  for j in "${jobs[@]}"; do
    IFS=: read -r name envs tool part <<< "$j"
    env $envs timeout 500 "$SAN" --tool "$tool" --error-exitcode 3 --print-limit 10 "$T/test_cuda_kernels" "$part" \
      > "$L/san-$name.txt" 2>&1 &
  done
  wait
  echo "== sanitize (after $SECONDS s)"
  for j in "${jobs[@]}"; do
    local name=${j%%:*}
    echo "$name: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$L/san-$name.txt" | tail -1) | $(last "$L/san-$name.txt")"
  done
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(apply build test time)
for s in "${stages[@]}"; do "stage_$s"; done
echo "all stages done after $SECONDS s"
tar czf "$OUT/logs.tgz" -C "$OUT" log && rm -rf "$L"
