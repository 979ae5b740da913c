#!/usr/bin/env bash
# The GPU reliability battery (issue 37): everything the CPU-only CI cannot check, in one call of under
# ten minutes on one H100 or H200, from the repository root:
#
#   OUT=$OUT bash bench/gpu/battery.sh      (.whl/ carried: diffusers' wheel, for the switch's Python tests)
#
# Steps, each process under its own time cap (170 + 60 + 280 s, each with 10 s to stop: under 9.5 minutes):
#   build     cmake (JATTN_CUDA=ON, JATTN_CUDA_ARCHS=90a, Release, ptxas -v) in $BUILD, the targets the
#             steps need, -j$(nproc)                                                         [CAP_BUILD]
#   faults    alone on the GPU: tests/test_cuda_faults.c: the calls the library must refuse (host
#             pointers during a capture, a stream of another device (skipped on one GPU, the reason
#             printed), a workspace too small), each status and message checked, nothing written; an
#             allocation failure with the device's memory nearly exhausted (OUT_OF_MEMORY, nothing
#             written, the next call after freeing gives the bits it gave before)          [CAP_FAULTS]
#   load      all at once, sharing the GPU: every GPU suite (test_cuda_device, test_parity /
#             test_padding / test_edges / test_masks cuda (test_masks also with v1, v6, v7 forced),
#             test_backward cuda part by part (AUTO: the backward v4 on Hopper; the masks part: v3, v4 for causal alone) and
#             its gate, fewq, masks and device parts with the backward v3 forced), beside them
#             COPIES copies of test_backward's device part and two of test_cuda_device (the load under
#             which issue 37's race showed), test_cuda_threads (THREADS host threads at once, one
#             context and one non-blocking stream each, and a forward and a backward plan they all run),
#             the randomised sweep (tests/test_sweep.c, SWEEP_DRAWS draws of budget SWEEP_BUDGET: forward
#             and backward, shapes, head dims 1..256, layouts, cross-attention, key padding, f32 and
#             tf32, host and device memory, CUDA graphs, plans; the other mask parts and grouped-query
#             heads where the cuda backend serves them: the forward every one, the backward v3),
#             the Python tests on CUDA (if torch sees a GPU), and compute-sanitizer memcheck, racecheck,
#             synccheck and initcheck on every kernel the library launches (tests/test_cuda_kernels.c
#             with the forward v1, v6, v7 and the backward v3, v4 forced: their pre-passes, the key
#             padding pre-pass and the backward v3's zeroing with them, and the masked calls: the
#             forward's masked instances and the backward v3's masked pre-pass and kernels)  [CAP_LOAD]
#   table     one row per process: its part, status (PASS, FAIL, TIMEOUT, SKIP), the checks passed and
#             failed (a suite's tally, pytest's counts, a sanitizer's errors), seconds; a row per part;
#             printed last, with the failures before it
# Writes under $OUT (default /tmp/battery): table.txt, failures.txt, README.md (the results' record: the
# commit, the machine, the command, the table; for bench/results/), build.txt (ptxas' registers and
# spills of the kernels), logs.tgz (every log). Knobs: STEPS (default "build faults load"), BUILD,
# CAP_BUILD CAP_FAULTS CAP_LOAD (s), COPIES, THREADS, SWEEP_DRAWS, SWEEP_BUDGET, PYTESTS (the Python test
# files), SAN_KERNELS (default "fwd:v1 fwd:v6 fwd:v7 bwd:v3 bwd:v4"), SAN_TOOLS, COMMIT (the commit the
# README names, where the tree has no .git).
set -u
OUT=${OUT:-/tmp/battery}
BUILD=${BUILD:-/tmp/jattn-battery}
STEPS=${STEPS:-"build faults load"}
CAP_BUILD=${CAP_BUILD:-170}
CAP_FAULTS=${CAP_FAULTS:-60}
CAP_LOAD=${CAP_LOAD:-280}
COPIES=${COPIES:-6}
THREADS=${THREADS:-16}
SWEEP_DRAWS=${SWEEP_DRAWS:-600}
SWEEP_BUDGET=${SWEEP_BUDGET:-3e7}
PYTESTS=${PYTESTS:-"python/tests/test_cuda.py python/tests/test_autograd.py python/tests/test_backward_precision.py python/tests/test_key_padding.py python/tests/test_bitwise.py python/tests/test_gil.py python/tests/test_masks.py"}
SAN_KERNELS=${SAN_KERNELS:-"fwd:v1 fwd:v6 fwd:v7 bwd:v3 bwd:v4"}
SAN_TOOLS=${SAN_TOOLS:-"memcheck racecheck synccheck initcheck"}
ROOT=$PWD
LOGS=$OUT/logs
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$LOGS"/*.status "$OUT"/table.txt "$OUT"/failures.txt
has() { [[ " $STEPS " == *" $1 "* ]]; }
SECONDS=0
# the CPU reference of the suites runs OpenMP threads in every process: let idle threads sleep
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# run PART NAME CAP [VAR=value ...] COMMAND...: in the background, its log LOGS/NAME.log; LOGS/NAME.status
# gets "PART rc seconds cap"
pids=""
run() {
  local part=$1 name=$2 cap=$3
  shift 3
  (
    t0=$SECONDS
    timeout -k 10 "$cap" env "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    echo "$part $rc $((SECONDS - t0)) $cap" > "$LOGS/$name.status"
  ) &
  pids="$pids $!"
}
wait_all() {
  for p in $pids; do wait "$p"; done
  pids=""
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo "unknown (COMMIT=... names it)")}$(git -C "$ROOT" status --porcelain 2> /dev/null | grep -q . && echo ' + working tree')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1)"
  echo "gpus: $(nvidia-smi -L 2> /dev/null | wc -l); cpus: $(nproc)"
  echo "nvcc: $(nvcc --version 2> /dev/null | tail -1)"
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || echo none)"
  echo "command: OUT=\$OUT $([ "$STEPS" != "build faults load" ] && echo "STEPS=\"$STEPS\" ")bash bench/gpu/battery.sh"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

TARGETS="jattn jattn_shared test_cuda_device test_parity test_padding test_edges test_masks test_backward \
test_cuda_threads test_cuda_faults test_cuda_kernels test_sweep"
if has build; then
  t0=$SECONDS
  timeout -k 10 "$CAP_BUILD" bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON \
      -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF -DCMAKE_CUDA_FLAGS='-Xptxas -v' &&
    cmake --build '$BUILD' -j $(nproc) --target $TARGETS" > "$LOGS/build.log" 2>&1
  echo "build $? $((SECONDS - t0)) $CAP_BUILD" > "$LOGS/build.status"
  echo "build: rc $(cut -d' ' -f2 "$LOGS/build.status") after ${SECONDS} s"
fi
T=$BUILD/tests
if [ ! -x "$T/test_sweep" ]; then
  echo "BUILD FAILED: no $T/test_sweep"
  grep -E "error" "$LOGS/build.log" 2> /dev/null | head -20
fi

if has faults && [ -x "$T/test_cuda_faults" ]; then # alone: it takes nearly all of the GPU's memory
  run faults test_cuda_faults "$CAP_FAULTS" JATTN_TEST_VERBOSE=1 "$T/test_cuda_faults" all
  wait_all
  echo "faults done after ${SECONDS} s"
fi

if has load && [ -x "$T/test_sweep" ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # the sanitizers first: the slowest processes
  if [ -x "$SAN" ]; then
    for kt in $SAN_KERNELS; do
      kind=${kt%%:*} ver=${kt##*:}
      if [ "$kind" = fwd ]; then var=JATTN_CUDA_KERNEL part=forward; else var=JATTN_CUDA_BWD_KERNEL part=backward; fi
      for tool in $SAN_TOOLS; do
        run sanitizer "san_${tool}_${kind}_$ver" "$CAP_LOAD" "$var=$ver" "$SAN" --tool "$tool" --error-exitcode 3 \
          --print-limit 30 "$T/test_cuda_kernels" "$part"
      done
    done
  else
    echo "sanitizer 77 0 0" > "$LOGS/san_missing.status"
    echo "SKIP: compute-sanitizer not found" > "$LOGS/san_missing.log"
  fi
  # every GPU suite
  run suites test_cuda_device "$CAP_LOAD" "$T/test_cuda_device"
  for t in test_parity test_padding test_edges test_masks; do run suites "${t}_cuda" "$CAP_LOAD" "$T/$t" cuda; done
  for k in v1 v6 v7; do run suites "test_masks_cuda_$k" "$CAP_LOAD" JATTN_CUDA_KERNEL=$k "$T/test_masks" cuda parity; done
  for part in gate chain floor padding fewq properties masks validation determinism tf32 device graph; do
    run suites "test_backward_cuda_$part" "$CAP_LOAD" "$T/test_backward" cuda "$part"
  done
  for part in gate fewq masks device; do
    run suites "test_backward_cuda_v3_$part" "$CAP_LOAD" JATTN_CUDA_BWD_KERNEL=v3 "$T/test_backward" cuda "$part"
  done
  # the load beside them, and the concurrency tests
  for i in $(seq 1 "$COPIES"); do
    run load "copy${i}_test_backward_cuda_device" "$CAP_LOAD" "$T/test_backward" cuda device
  done
  for i in 1 2; do run load "copy${i}_test_cuda_device" "$CAP_LOAD" "$T/test_cuda_device"; done
  run threads test_cuda_threads "$CAP_LOAD" "$T/test_cuda_threads" "$THREADS" 3
  # the randomised sweep
  run sweep test_sweep_cuda "$CAP_LOAD" "$T/test_sweep" cuda "$SWEEP_DRAWS" "$SWEEP_BUDGET"
  # the Python tests on CUDA: the package from python/src with this build's library
  if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
    PKG=$(mktemp -d)
    L=$(find "$BUILD" -maxdepth 2 -name 'libjattn.so*' -type f | head -1)
    cp -r "$ROOT/python/src/jattn" "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$L" "$PKG/jattn/_lib/libjattn.so"
    cc -I"$ROOT/include" "$ROOT/tests/abi/jattn_abi_probe.c" -o "$PKG/abi_probe" &&
      "$PKG/abi_probe" > "$PKG/jattn/_lib/abi_probe.txt" # as the package's build writes it
    # diffusers (the switch's tests) from a wheel carried in .whl/, where the machine cannot reach PyPI
    if ls "$ROOT"/.whl/*.whl > /dev/null 2>&1 && ! python3 -c "import diffusers" > /dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$PKG" "$ROOT"/.whl/*.whl \
        > "$LOGS/pip.log" 2>&1
    fi
    # shellcheck disable=SC2086
    run python pytest_cuda "$CAP_LOAD" PYTHONPATH="$PKG" JATTN_CLI="$BUILD/tools/jattn" python3 -m pytest -q \
      -p no:cacheprovider $PYTESTS
  else
    echo "python 77 0 0" > "$LOGS/pytest_cuda.status"
    echo "SKIP: python3 has no torch with CUDA here" > "$LOGS/pytest_cuda.log"
  fi
  echo "load: $(echo "$pids" | wc -w) processes started after ${SECONDS} s"
  wait_all
  echo "load done after ${SECONDS} s"
fi

python3 "$ROOT/bench/gpu/battery_table.py" "$LOGS" "$OUT/machine.txt" "$OUT" 2>&1 || {
  echo "(battery_table.py failed: the statuses as they are)"
  cat "$LOGS"/*.status
}
(cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)
echo "total ${SECONDS} s; logs in $OUT/logs.tgz"
[ -f "$OUT/failures.txt" ] && head -60 "$OUT/failures.txt"
[ -f "$OUT/table.txt" ] && cat "$OUT/table.txt"
exit 0
