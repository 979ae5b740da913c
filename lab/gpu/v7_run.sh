#!/usr/bin/env bash
# Issue 29's GPU call: kernel v7 (forward, mma.sync 2xFP16) and the backward v3, forced, on the GPU
# machine, from the repository root, in one call of under 9 minutes:
#   OUT=$OUT bash lab/gpu/v7_run.sh
# Steps (each under its own cap):
#   build   cmake (CUDA, JATTN_CUDA_ARCHS=90a: the H200 runs the sm_90a build of the portable
#           kernels, the same source as their sm_80 machine code) in $BUILD, the targets below [200 s]
#   test    in parallel processes: test_cuda_device (every version forced on its shape table, v7
#           included), test_parity / test_padding / test_edges cuda with JATTN_CUDA_KERNEL=v7, the
#           backward battery with JATTN_CUDA_BWD_KERNEL=v3 (tests/test_backward.c, its parts),
#           compute-sanitizer memcheck and racecheck on small v7 calls [STEP_TEST s, default 150]
#   time    forward at the issue's shapes: v7 forced, AUTO; PyTorch fp32 SDPA
#           (torch_sdpa_peer.py, same shapes); backward v3 forced and PyTorch's fp32 backward
#           (torch_sdpa_backward.py); forward + backward through autograd with both forced
#           (backward_v3_autograd.py); accuracy of v7 at each head_dim (jattn run --check)
#   warps   the forward with v7's warps per CTA forced (tools/jattn_w4, _w6, _w8 of the carry,
#           lab/gpu/v7_carry.sh) at the issue's shapes and the AUTO head dims, interleaved
#   ncu     Nsight Compute on one v7 launch at (1,24,4608,128) and (1,24,1536,128)
#   cpu     lab/cpu/xeon_run.sh (issue 31: the cpu backend on this machine's Xeon), BASE=none
#   python  the Python package's tests (python/tests) on this GPU: the package from python/src with the
#           carried libjattn.so; diffusers and its missing needs from wheels carried in .whl (if any)
# Logs under $OUT, the table last ($OUT/table.txt). STEPS="build test time" narrows them; without
# build, the binaries of .carry-pack/carry.tgz (made on the development machine) run.
set -u
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-/tmp/jattn-v7}
STEPS=${STEPS:-"build test time"} # also: warps ncu cpu cpuab python repro
STEP_TEST=${STEP_TEST:-150}
ISSUE="1,16,4096,72 1,24,4096,96 1,12,4096,256 1,24,4608,128 1,24,1536,128"
AUTO_DIMS="1,16,4096,40 1,16,4096,80 1,16,4096,88 1,8,4096,160"
mkdir -p "$OUT"
ROOT=$PWD
has() { [[ " $STEPS " == *" $1 "* ]]; }
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/smi.txt" 2>&1

if has build; then
  timeout 200 bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a \
      -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF -DCMAKE_CUDA_FLAGS='-Xptxas -v' > /dev/null &&
    cmake --build '$BUILD' -j \$(nproc) --target jattn jattn_shared test_backward test_cuda_device test_parity \
      test_padding test_edges" > "$OUT/build.log" 2>&1
  echo "build rc $? after ${SECONDS} s"
  grep -A2 "attention_f32_mma_f16x2_v7_kernel\|backward_v3\|bwd_v3" "$OUT/build.log" | grep -E "registers|spill" |
    sort | uniq -c | head -12
fi
# binaries built elsewhere: .carry-pack/carry.tgz (build/{tests,tools,libjattn.so}, lib/), when STEPS has no build
if ! has build && [ -f "$ROOT/.carry-pack/carry.tgz" ]; then
  mkdir -p /tmp/carried && tar xzf "$ROOT/.carry-pack/carry.tgz" -C /tmp/carried
  BUILD=/tmp/carried/build
  export LD_LIBRARY_PATH=/tmp/carried/lib:${LD_LIBRARY_PATH:-}
fi
J=$BUILD/tools/jattn
L=$(find "$BUILD" -maxdepth 2 -name 'libjattn.so*' -type f | head -1)
[ -x "$J" ] || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 1; }

if has test; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  pids=""
  run_bg() { local name=$1; shift; timeout "$STEP_TEST" "$@" > "$OUT/t_$name.log" 2>&1 & pids="$pids $!"; }
  run_bg device "$BUILD/tests/test_cuda_device"
  JATTN_CUDA_KERNEL=v7 run_bg parity "$BUILD/tests/test_parity" cuda
  JATTN_CUDA_KERNEL=v7 run_bg padding "$BUILD/tests/test_padding" cuda
  JATTN_CUDA_KERNEL=v7 run_bg edges "$BUILD/tests/test_edges" cuda
  for part in gate chain padding properties validation determinism tf32 device graph ${BWD_EXTRA_PARTS:-}; do
    JATTN_CUDA_BWD_KERNEL=v3 run_bg "bwd_$part" "$BUILD/tests/test_backward" cuda "$part"
  done
  for part in ${BWD_AUTO_PARTS:-}; do # AUTO: the Hopper backward v2 where it applies
    run_bg "bwd_auto_$part" "$BUILD/tests/test_backward" cuda "$part"
  done
  JATTN_CUDA_KERNEL=v7 run_bg memcheck "$SAN" --tool memcheck --error-exitcode 3 "$J" run --backend cuda --batch 2 \
    --heads 2 --seq 130 --seq-kv 77 --dim 72 --kv-len 50,77 --reps 1
  JATTN_CUDA_KERNEL=v7 run_bg racecheck "$SAN" --tool racecheck --error-exitcode 3 "$J" run --backend cuda --heads 2 \
    --seq 200 --seq-kv 150 --dim 160 --reps 1
  for p in $pids; do wait "$p"; done
  {
    for f in "$OUT"/t_*.log; do
      n=$(basename "$f" .log)
      echo "$n: $(grep -E '^(test_|PASS|FAIL|[0-9]+ passed|passed)' "$f" | tail -1) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"
    done
    grep -h -E "^FAIL|^ *FAIL" "$OUT"/t_*.log | head -40
  } > "$OUT/tests.txt"
  echo "tests done after ${SECONDS} s"
fi

if has time; then
  {
    for s in $ISSUE $AUTO_DIMS; do
      IFS=, read -r b h n d <<< "$s"
      for k in v7 auto; do
        echo "TAG fwd_$k"; JATTN_CUDA_KERNEL=${k#auto} timeout 20 "$J" run --backend cuda --batch "$b" --heads "$h" \
          --seq "$n" --dim "$d" --reps 10 --no-check --json; echo "rc $?"
      done
      echo "TAG check_v7"; JATTN_CUDA_KERNEL=v7 timeout 20 "$J" run --backend cuda --batch 1 --heads 4 --seq 1000 \
        --dim "$d" --reps 1 --json; echo "rc $?"
    done
    for s in 1,24,1536,128 1,24,4608,128; do
      IFS=, read -r b h n d <<< "$s"
      echo "TAG bwd_auto"; timeout 30 "$J" run --backward --backend cuda --batch "$b" --heads "$h" --seq "$n" --dim "$d" \
        --reps 5 --no-check --json; echo "rc $?"
    done
    for s in $ISSUE; do
      IFS=, read -r b h n d <<< "$s"
      echo "TAG bwd_v3"; JATTN_CUDA_BWD_KERNEL=v3 timeout 30 "$J" run --backward --backend cuda --batch "$b" --heads "$h" \
        --seq "$n" --dim "$d" --reps 5 --no-check --json; echo "rc $?"
    done
  } > "$OUT/bench.log" 2>&1
  echo "jattn times done after ${SECONDS} s"
  (cd "$ROOT/bench/gpu" && timeout 90 python3 torch_sdpa_peer.py $ISSUE $AUTO_DIMS) > "$OUT/torch_fwd.log" 2>&1
  (cd "$ROOT/bench/gpu" && timeout 60 python3 torch_sdpa_backward.py $ISSUE) > "$OUT/torch_bwd.log" 2>&1
  echo "torch times done after ${SECONDS} s"
  PKG=$(mktemp -d)
  cp -r "$ROOT/python/src/jattn" "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$L" "$PKG/jattn/_lib/libjattn.so"
  PYTHONPATH=$PKG JATTN_CUDA_KERNEL=v7 JATTN_CUDA_BWD_KERNEL=v3 timeout 90 python3 "$ROOT/bench/gpu/backward_v3_autograd.py" \
    $ISSUE > "$OUT/autograd.log" 2>&1
  PYTHONPATH=$PKG JATTN_CUDA_KERNEL=v7 JATTN_CUDA_BWD_KERNEL=v3 timeout 60 python3 "$ROOT/lab/gpu/autograd_profile.py" \
    1,24,1536,128 > "$OUT/profile.txt" 2>&1
  echo "autograd done after ${SECONDS} s"
  python3 "$ROOT/lab/gpu/v7_table.py" "$OUT" > "$OUT/table.txt" 2>&1
fi
if has repro; then # a seed that failed (REPRO_SEED, the backward's device part), three times, then under synccheck
  for i in 1 2 3; do
    JATTN_TEST_SEED=${REPRO_SEED:-214623919985373} JATTN_CUDA_BWD_KERNEL=v3 timeout 60 "$BUILD/tests/test_backward" cuda \
      device > "$OUT/repro_$i.log" 2>&1
    echo "repro $i: $(tail -1 "$OUT/repro_$i.log")" | tee -a "$OUT/tests.txt"
  done
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in synccheck racecheck; do
    JATTN_TEST_SEED=${REPRO_SEED:-214623919985373} JATTN_CUDA_BWD_KERNEL=v3 timeout 150 "$SAN" --tool $tool \
      "$BUILD/tests/test_backward" cuda padding > "$OUT/repro_$tool.log" 2>&1
    echo "repro $tool (padding part): $(grep -E 'SUMMARY' "$OUT/repro_$tool.log" | tail -1)" | tee -a "$OUT/tests.txt"
  done
fi
if has warps; then
  {
    for round in 1 2; do
      for s in $ISSUE $AUTO_DIMS; do
        IFS=, read -r b h n d <<< "$s"
        for w in 4 6 8 auto; do
          tool=$BUILD/tools/jattn_w$w; [ "$w" = auto ] && tool=$J
          [ -x "$tool" ] || continue
          echo "TAG w$w"; JATTN_CUDA_KERNEL=v7 timeout 20 "$tool" run --backend cuda --batch "$b" --heads "$h" \
            --seq "$n" --dim "$d" --reps 10 --no-check --json; echo "rc $?"
        done
      done
    done
  } > "$OUT/warps.log" 2>&1
  python3 - "$OUT/warps.log" > "$OUT/warps.txt" <<'PY'
import json, sys
rows, tag = {}, "?"
for line in open(sys.argv[1]):
    if line.startswith("TAG "):
        tag = line.split()[1]
    elif line.startswith("{"):
        j = json.loads(line)
        key = (j["batch"], j["heads"], j["seq_q"], j["dim"])
        rows.setdefault(key, {}).setdefault(tag, []).append(j["ms"])
print("v7 forward, ms (min of 2 rounds of medians) by warps per CTA")
print("| (B,H,S,D) | w4 | w6 | w8 | auto |")
for k, r in rows.items():
    print(f"| {k} | " + " | ".join(f"{min(r[t]):.3f}" if t in r else "-" for t in ("w4", "w6", "w8", "wauto")) + " |")
PY
  echo "warps done after ${SECONDS} s"
fi
if has ncu; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for s in 1,24,4608,128 1,24,1536,128 1,12,4096,256; do
    IFS=, read -r b h n d <<< "$s"
    JATTN_CUDA_KERNEL=v7 timeout 120 "$NCU" --clock-control none -k regex:attention_f32_mma_f16x2_v7 -c 1 \
      --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      "$J" run --backend cuda --batch "$b" --heads "$h" --seq "$n" --dim "$d" --reps 1 --no-check > "$OUT/ncu_${n}_${d}.txt" 2>&1
  done
  echo "ncu done after ${SECONDS} s"
fi
if has cpu; then
  BASE=none OUT=$OUT/xeon timeout 300 sh "$ROOT/lab/cpu/xeon_run.sh" > "$OUT/xeon.log" 2>&1
  echo "cpu done after ${SECONDS} s"
fi
if has python; then
  PKG=$(mktemp -d)
  cp -r "$ROOT/python/src/jattn" "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$L" "$PKG/jattn/_lib/libjattn.so"
  cc -I"$ROOT/include" "$ROOT/tests/abi/jattn_abi_probe.c" -o /tmp/jattn_abi_probe && /tmp/jattn_abi_probe \
    > "$PKG/jattn/_lib/abi_probe.txt" # as the package's build writes it (python/CMakeLists.txt)
  PYP=$PKG
  if ls "$ROOT"/.whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$ROOT"/.whl/*.whl \
      > "$OUT/pip.log" 2>&1 && PYP=$PKG:/tmp/site
  fi
  (cd "$ROOT" && PYTHONPATH=$PYP JATTN_CLI=$J timeout "${PYTEST_CAP:-300}" python3 -m pytest -q -p no:cacheprovider \
    ${PYTESTS:-python/tests}) \
    > "$OUT/pytest.log" 2>&1
  echo "python: $(tail -1 "$OUT/pytest.log") after ${SECONDS} s" | tee "$OUT/python.txt"
fi
if has cpuab; then
  OUT=$OUT/xeon_ab timeout 300 sh "$ROOT/lab/cpu/xeon_ab.sh" > "$OUT/xeon_ab.log" 2>&1
  echo "cpuab done after ${SECONDS} s"
fi
# the device returns at most 8 files: every log in one archive beside the summaries
(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz ./* && find . -mindepth 1 -maxdepth 1 ! -name logs.tgz \
  ! -name table.txt ! -name tests.txt ! -name warps.txt ! -name xeon.log ! -name xeon_ab.log ! -name bench.log ! -name python.txt -exec rm -rf {} +)
[ -f "$OUT/tests.txt" ] && cat "$OUT/tests.txt"
[ -f "$OUT/warps.txt" ] && cat "$OUT/warps.txt"
[ -f "$OUT/xeon.log" ] && tail -40 "$OUT/xeon.log"
[ -f "$OUT/xeon_ab.log" ] && tail -40 "$OUT/xeon_ab.log"
echo "total ${SECONDS} s"
[ -f "$OUT/table.txt" ] && cat "$OUT/table.txt"
exit 0
