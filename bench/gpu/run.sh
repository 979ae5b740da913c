#!/usr/bin/env bash
# The GPU harness (issue 4), one run on the GPU machine, from the repository root:
#   build (cmake -DJATTN_CUDA=ON) -> GPU tests (the parity suite, device-pointer tests, edges)
#   -> the parity suite once more on the forced kernels (v1, v6, v7) ->
#   compute-sanitizer memcheck, racecheck, synccheck, initcheck over the GPU tests on their small
#   shapes -> the f32 error's tail on single-row peaky cases (accuracy_tail) -> benchmark: jattn
#   kernel versions (f32, tf32) and PyTorch SDPA (fp32 efficient-attention, bf16 cuDNN) at the
#   shapes of issue 4 -> table LAST.
# usage: bench/gpu/run.sh            (OUT=dir for logs, default build-gpu/out)
#        BUILD=dir bench/gpu/run.sh  with binaries built elsewhere (same layout as a cmake build
#        dir: tests/, tools/jattn, jattn_gpu_bench, sanitize_small, accuracy_tail) and STEPS without "build"
# env:   JATTN_GPU_STEPS="build test parity3 sanitize tail sass bench jattn padding ab ncu cpu"
#        (default: all but ab, ncu and cpu)
#        JATTN_AB_BASE=path: the ab step times this jattn_gpu_bench (an older build) against the
#        current one, interleaved, JATTN_AB_ROUNDS rounds (default 3)
#        JATTN_SANITIZE_TIMEOUT=seconds per compute-sanitizer run (default 300)
#        JATTN_TEST_TIMEOUT=seconds per test of the parity3 step (default 600)
#        JATTN_SANITIZE_TOOLS="memcheck ..." and JATTN_SANITIZE_TESTS="test|test ..." (|-separated;
#        a vN prefix forces that kernel) narrow the sanitize step
#        JATTN_GPU_SHAPES="1,24,1536,128 ..." (default: the five shapes of issue 4)
#        JATTN_BENCH_VERSIONS=v1,v6,v7 (which kernel versions the bench times)
#        JATTN_PARITY_VERSIONS="v1 v6 v7" (the forced versions of the parity3 step)
#        JATTN_TEST_KERNELS="auto v6" (the test step runs the GPU tests once per entry: auto = the
#        default choice, vN = JATTN_CUDA_KERNEL=vN forced)
#        JATTN_TAIL_KERNELS="auto v7" (the tail step's peaky tail once per entry, as above)
#        JATTN_NCU_VERSION=v6 (the version the ncu step profiles)
#        JATTN_CPU_BENCH_CAP=seconds: the hook that runs bench/cpu/run.sh when the step "cpu"
#        is asked for (output to $OUT/cpu.txt)
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/out}
STEPS=${JATTN_GPU_STEPS:-"build test parity3 sanitize tail sass bench jattn padding"}   # also: ab, ncu, cpu
export JATTN_BENCH_VERSIONS=${JATTN_BENCH_VERSIONS:-v1,v6,v7}
SHAPES=${JATTN_GPU_SHAPES:-}
mkdir -p "$OUT"
status=0
has() { [[ " $STEPS " == *" $1 "* ]]; }
note() { echo "== $*"; }

note "machine"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; nvcc --version | tail -1

if has build; then
  note "build"
  { cmake -S . -B "$BUILD" -DJATTN_CUDA=ON -DJATTN_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS="-Xptxas -v" &&
    cmake --build "$BUILD" -j"$(nproc)"; } > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
  awk '/Compiling entry function/{f=$7} /spill/{s=$0} /Used [0-9]+ registers/{if (f ~ /sm_90a/ || 1) print f, $5, "regs,", s}' "$OUT/build.log" |
    sed -E "s/ +/ /g; s/bytes stack frame/stack/; s/bytes spill stores/spill st/; s/bytes spill loads/spill ld/" | sort -u | head -24
  # the benchmark programs (JATTN_BUILD_BENCH) where the steps below look for them
  for t in jattn_gpu_bench sanitize_small accuracy_tail; do cp "$BUILD/bench/$t" "$BUILD/$t"; done ||
    { echo "BENCH BUILD FAILED"; exit 1; }
fi

if has sass; then
  note "sass (v7: HMMA count, local memory)"
  obj=$(find "$BUILD" -name 'attention_v7_mma_f16x2.cu.o' | head -1)
  cuobjdump -sass "$obj" > /tmp/v7.sass 2>&1
  awk '/Function :/{f=$3} /HMMA/{h[f]++} /LDL|STL/{l[f]++} END{for(k in h) printf "%-70s HMMA %5d  LDL/STL %d\n", k, h[k], l[k]+0}' /tmp/v7.sass
  grep -m3 HMMA /tmp/v7.sass
  for src in attention_v6_sm90_fa3_f16x2; do
    note "sass ($src: HGMMA count, local memory; only the sm_90a instances have a body)"
    obj=$(find "$BUILD" -name "$src.cu.o" | head -1)
    cuobjdump -sass "$obj" > /tmp/sm90.sass 2>&1
    awk '/Function :/{f=$3} /HGMMA/{h[f]++} /LDL|STL/{l[f]++} /LDS/{s[f]++} /BLKCP/{b[f]++} /SETMAXREG/{r[f]++} END{for(k in h) printf "%-70s HGMMA %5d  LDL/STL %d  LDS %d  BLKCP %d  SETMAXREG %d\n", k, h[k], l[k]+0, s[k]+0, b[k]+0, r[k]+0}' /tmp/sm90.sass
  done
fi

# The GPU tests: the whole parity suite (both precisions), the device-pointer tests (streams,
# graphs, misaligned and overlapping pointers, allocation counts, kernel versions), the edges.
GPU_TESTS=("test_cuda_device" "test_edges cuda" "test_padding cuda" "test_parity cuda")   # the quick ones first

if has test; then
  for kern in ${JATTN_TEST_KERNELS:-auto}; do
    note "tests (the GPU tests, full parity suite), kernel $kern"
    log="$OUT/tests.log"; [ "$kern" = auto ] || log="$OUT/tests_$kern.log"
    : > "$log"
    for t in "${GPU_TESTS[@]}"; do
      if [ "$kern" = auto ]; then $BUILD/tests/$t >> "$log" 2>&1; else JATTN_CUDA_KERNEL=$kern $BUILD/tests/$t >> "$log" 2>&1; fi
      rc=$?
      echo "$kern $t: rc=$rc $(grep -E "^$t|^${t%% *}" "$log" | grep -E 'passed' | tail -1)"
      [ $rc -eq 0 ] || [ "$kern" != auto ] || status=1
    done
    if [ "$kern" = auto ]; then
      grep -E "^FAIL" "$log" | head -20
    else   # a forced version refuses other head dims (UNSUPPORTED): counted apart, as in parity3
      refused=$(grep -E "^FAIL" "$log" | grep -c JATTN_ERROR_UNSUPPORTED)
      other=$(grep -E "^FAIL" "$log" | grep -vc JATTN_ERROR_UNSUPPORTED)
      echo "$kern: $refused FAIL lines are refusals (UNSUPPORTED), $other other failures"
      grep -E "^FAIL" "$log" | grep -v JATTN_ERROR_UNSUPPORTED | head -20
      [ "$other" -eq 0 ] || status=1
    fi
  done
fi

# worst (max_abs / f32 gate) over the D=128 "large" rows of a verbose parity log (gate: 1e-5 x max(1, max|ref|))
worst_large_f32() {
  grep -E "D=128 .*dist=large backend=cuda f32: rel_l2" "$1" | sed -E 's/.*max_abs ([^ ]+) \(max\|ref\| ([^)]+)\).*/\1 \2/' |
    awk '{r=$1/(1e-5*($2>1?$2:1)); if(r>w)w=r} END{printf "%.2f", w}'
}

if has parity3; then
  # The parity suite once more on each forced kernel version: v1 and v7 take every problem (v7 runs
  # a single key and D > 256 on v1), v6 (sm_90a) D 64 and 128 (its refusals of other D are expected
  # and counted apart).
  for ver in ${JATTN_PARITY_VERSIONS:-v1 v6 v7}; do
    note "parity suite on kernel $ver (JATTN_CUDA_KERNEL=$ver)"
    JATTN_CUDA_KERNEL=$ver JATTN_TEST_VERBOSE=1 timeout "${JATTN_TEST_TIMEOUT:-600}" "$BUILD/tests/test_parity" cuda > "$OUT/parity_$ver.log" 2>&1 ||
      echo "$ver parity: rc=$? (124: timed out)"
    ran=$(grep -cE "^(ok  |FAIL) .* rel_l2 " "$OUT/parity_$ver.log")
    bad=$(grep -cE "^FAIL .* rel_l2 " "$OUT/parity_$ver.log")
    refused=$(grep -c "JATTN_ERROR_UNSUPPORTED" "$OUT/parity_$ver.log")
    other=$(grep -E "^FAIL" "$OUT/parity_$ver.log" | grep -vE " rel_l2 |JATTN_ERROR_UNSUPPORTED" | wc -l)
    worst=$(grep -E "^(ok  |FAIL) .* f32: rel_l2 " "$OUT/parity_$ver.log" | sed -E 's/.* rel_l2 ([^ ]+) .*/\1/' | sort -g | tail -1)
    echo "$ver parity: $ran checks ran, $bad failed the gate, $refused refused (UNSUPPORTED), $other other failures;" \
         "worst f32 rel_l2 ${worst:-none}, worst D=128 large max_abs/gate $(worst_large_f32 "$OUT/parity_$ver.log")"
    grep -E "^FAIL" "$OUT/parity_$ver.log" | grep -v JATTN_ERROR_UNSUPPORTED | head -20
    [ "$ran" -gt 0 ] && [ "$bad" -eq 0 ] && [ "$other" -eq 0 ] || status=1
    # key padding on the same forced version (its refusals of other head dims counted apart)
    JATTN_CUDA_KERNEL=$ver timeout "${JATTN_TEST_TIMEOUT:-600}" "$BUILD/tests/test_padding" cuda > "$OUT/padding_$ver.log" 2>&1
    pbad=$(grep -E "^FAIL" "$OUT/padding_$ver.log" | grep -vc JATTN_ERROR_UNSUPPORTED)
    echo "$ver padding: $(tail -1 "$OUT/padding_$ver.log"); $pbad failures other than refusals"
    grep -E "^FAIL" "$OUT/padding_$ver.log" | grep -v JATTN_ERROR_UNSUPPORTED | head -10
    [ "$pbad" -eq 0 ] || status=1
  done
fi

if has sanitize; then
  # Every tool over: sanitize_small (each kernel version and precision on odd shapes), the GPU
  # tests on their quick (small) shapes with the default kernels, with v6 forced, and with v7
  # forced (its warps per CTA chosen per call). A test's own failures give rc 1; a sanitizer finding
  # gives rc 3 (--error-exitcode).
  note "compute-sanitizer (memcheck racecheck synccheck initcheck) over sanitize_small and the GPU tests"
  : > "$OUT/sanitize.log"
  SAN_TESTS=${JATTN_SANITIZE_TESTS:-sanitize_small|tests/test_parity cuda|v6 tests/test_parity cuda|v7 tests/test_parity cuda|tests/test_padding cuda|tests/test_cuda_device|tests/test_edges cuda}
  IFS='|' read -r -a san_tests <<< "$SAN_TESTS"
  for tool in ${JATTN_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for t in "${san_tests[@]}"; do
      env=(JATTN_TEST_QUICK=1)
      case $t in v[1-9]\ *) env+=(JATTN_CUDA_KERNEL=${t%% *}); t=${t#* } ;; esac
      echo "---- $tool ${env[*]} $t" >> "$OUT/sanitize.log"
      env "${env[@]}" timeout "${JATTN_SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool $tool --error-exitcode 3 $BUILD/$t >> "$OUT/sanitize.log" 2>&1
      rc=$?
      echo "$tool ${env[1]:-} $t: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize.log" | tail -1)"
      [ $rc -eq 3 ] || [ $rc -ge 124 ] && status=1
    done
  done
fi

if has tail && [ -x "$BUILD/accuracy_tail" ]; then
  # The f32 error's tail where the gate is tightest: one query row, peaky logits (no averaging
  # over rows), 1000 fresh draws per head_dim; the gate must hold on every draw.
  note "accuracy tail (single-row peaky cases, f32, ${JATTN_TAIL_DRAWS:-1000} draws each)"
  # every kernel on the same draws (one seed for all, printed)
  tail_seed=${JATTN_TEST_SEED:-$(date +%s)}
  echo "tail seed $tail_seed"
  for kern in ${JATTN_TAIL_KERNELS:-auto}; do
    for d in 128 64; do
      echo "kernel $kern D=$d seed $tail_seed" >> "$OUT/tail.txt"
      if [ "$kern" = auto ]; then JATTN_TEST_SEED=$tail_seed "$BUILD/accuracy_tail" cuda 1 2 1 1000 $d peaky ${JATTN_TAIL_DRAWS:-1000}
      else JATTN_TEST_SEED=$tail_seed JATTN_CUDA_KERNEL=$kern "$BUILD/accuracy_tail" cuda 1 2 1 1000 $d peaky ${JATTN_TAIL_DRAWS:-1000}; fi |
        tee -a "$OUT/tail.txt" | grep TAIL | sed "s/^/$kern D=$d: /"
    done
  done
  grep -q "fails=[1-9]" "$OUT/tail.txt" && status=1
  # One head_dim column, uniform inputs: an output can nearly cancel (the mean of v), where even
  # float32 weights rounded once exceed the gate on ~5e-5 of the draws
  # (bench/accuracy/fp32_floor.py); reported beside that floor, not gated.
  note "accuracy tail (D=1 uniform, f32, ${JATTN_TAIL_D1_DRAWS:-20000} draws; float32 floor ~5e-5 of draws over the gate)"
  "$BUILD/accuracy_tail" cuda 1 1 100 77 1 uniform ${JATTN_TAIL_D1_DRAWS:-20000} | tee "$OUT/tail_d1.txt" | grep TAIL
fi

if has ncu; then
  # Profile of a forced kernel version at (1,24,4608,128), the clocks left alone (METHOD.md).
  nv=${JATTN_NCU_VERSION:-v6}
  note "ncu: $nv f32 at (1,24,4608,128)"
  JATTN_BENCH_VERSIONS=$nv JATTN_BENCH_REPS=1 timeout 300 ncu --clock-control none -k regex:attention_f32_sm90 -c 1 --set full \
    --import-source no --page details "$BUILD/jattn_gpu_bench" 1,24,4608,128 > "$OUT/ncu_$nv.txt" 2>&1
  JATTN_BENCH_VERSIONS=$nv JATTN_BENCH_REPS=1 timeout 300 ncu --clock-control none -k regex:attention_f32_sm90 -c 1 --set full \
    --page source --print-source sass "$BUILD/jattn_gpu_bench" 1,24,4608,128 > "$OUT/ncu_${nv}_sass.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Achieved Occupancy" "$OUT/ncu_$nv.txt" | head -12
fi

if has jattn && [ -x "$BUILD/tools/jattn" ]; then
  note "jattn run --backend cuda (default job, f32 and tf32)"
  { "$BUILD/tools/jattn" run --backend cuda; "$BUILD/tools/jattn" run --backend cuda --precision tf32; } 2>&1 | tail -30 || status=1
fi

if has padding && [ -x "$BUILD/tools/jattn" ]; then
  note "key padding beside the unpadded call (1,24,4608,128), cuda (bench/padding/run.sh)"
  bash bench/padding/run.sh cuda 4608 "${JATTN_PADDING_ROUNDS:-5}" "$BUILD/tools/jattn" | tee "$OUT/padding.md" || status=1
fi

if has ab && [ -x "${JATTN_AB_BASE:-}" ]; then
  # The same shapes on an older build and on this one, interleaved round by round.
  note "ab: $JATTN_AB_BASE against $BUILD/jattn_gpu_bench, ${JATTN_AB_ROUNDS:-3} rounds"
  : > "$OUT/ab.txt"
  for r in $(seq "${JATTN_AB_ROUNDS:-3}"); do
    "$JATTN_AB_BASE" $SHAPES 2>&1 | grep RESULT | sed "s/^RESULT /RESULT base-/" >> "$OUT/ab.txt"
    "$BUILD/jattn_gpu_bench" $SHAPES 2>&1 | grep RESULT | sed "s/^RESULT /RESULT new-/" >> "$OUT/ab.txt"
  done
  python3 - "$OUT/ab.txt" <<'EOF'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    t[(f[1].split("-", 1)[1], tuple(f[2:6]), f[1].split("-", 1)[0])].append(float(f[7]))
keys = sorted({(k[0], k[1]) for k in t})
print("| impl | (B,H,S,D) | base TFLOP/s (median, min..max) | new TFLOP/s | new/base |")
print("| --- | --- | --- | --- | ---: |")
for impl, shape in keys:
    b, n = t.get((impl, shape, "base"), []), t.get((impl, shape, "new"), [])
    if not b or not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    print("| %s | (%s) | %.1f (%.1f..%.1f) | %.1f (%.1f..%.1f) | %.3f |" % (impl, ",".join(shape), mb, min(b), max(b), mn, min(n), max(n), mn / mb))
EOF
fi

if has bench; then
  note "bench"
  "$BUILD/jattn_gpu_bench" $SHAPES > "$OUT/bench.txt" 2>&1 || status=1
  PYTHONUNBUFFERED=1 python3 bench/gpu/torch_sdpa_peer.py $SHAPES >> "$OUT/bench.txt" 2>&1 || status=1
  grep -vE "^RESULT" "$OUT/bench.txt" | head -20
fi

if has cpu && [ -x bench/cpu/run.sh ]; then
  note "cpu bench hook (bench/cpu/run.sh, capped at ${JATTN_CPU_BENCH_CAP:-240} s)"
  OUT="$OUT" timeout "${JATTN_CPU_BENCH_CAP:-240}" bench/cpu/run.sh > "$OUT/cpu.txt" 2>&1 || echo "cpu bench: rc=$?"
  tail -20 "$OUT/cpu.txt"
fi

if has bench; then
  note "results (median CUDA-event us per call; rel_l2/max_abs vs float64 on sampled rows)"
  python3 bench/gpu/table.py "$OUT/bench.txt" | tee "$OUT/table.md"
fi
exit $status
