#!/bin/sh
# Side-by-side CPU benchmark: FMA peak, jattn --backend cpu, the BLAS attention baseline
# (OpenBLAS via dlopen, when installed) and PyTorch CPU SDPA (when importable), 1 thread and all
# cores, medians of repeats; writes bench/results/cpu-LABEL.{md,jsonl,png}.
#
# usage (repository root): sh bench/cpu/run.sh [LABEL] [SEQS] [REPS]
#   LABEL  names the result files (default zen4)     SEQS  comma list (default 512,1024,1536,3072,4608)
#   REPS   timed repeats per point, median (default 5)
# Env: THREADS (default "1,<all cores>"), H (24), D (128), CC (the C compiler; default: CMake's choice), BUILD (build-bench-cpu),
#      BENCH_LOGIT_STD (1: standard-normal q, k; 8: peaky logits, jattn's compensated scores).
# Whatever cannot be measured (no OpenBLAS, no torch, no matplotlib) is printed and left out.
set -u
LABEL=${1:-zen4}
SEQS=${2:-512,1024,1536,3072,4608}
REPS=${3:-5}
H=${H:-24}
D=${D:-128}
NPROC=$(nproc 2>/dev/null || echo 1)
THREADS=${THREADS:-1,$NPROC}
[ "$THREADS" = "1,1" ] && THREADS=1
BUILD=${BUILD:-build-bench-cpu}
OUT=bench/results
mkdir -p "$OUT"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
echo "load before the run: $LOAD_BEFORE"

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_BUILD_TESTS=OFF -DJATTN_BUILD_BENCH=ON \
  ${CC:+-DCMAKE_C_COMPILER="$CC"} > "$BUILD.log" 2>&1 &&
  cmake --build "$BUILD" -j "$NPROC" --target bench_cpu >> "$BUILD.log" 2>&1 ||
  { echo "build failed, see $BUILD.log"; exit 1; }

RAW="$OUT/cpu-$LABEL.jsonl"
: > "$RAW"
echo "== jattn, FMA peak, BLAS: H=$H D=$D threads=$THREADS seqs=$SEQS reps=$REPS"
"$BUILD/bench/bench_cpu" "$H" "$D" "$REPS" "$THREADS" "$SEQS" | tee -a "$RAW"
if command -v python3 >/dev/null 2>&1; then
  echo "== PyTorch CPU SDPA"
  python3 bench/cpu/torch_cpu_sdpa.py "$H" "$D" "$REPS" "$THREADS" "$SEQS" | tee -a "$RAW"
  LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
  echo "load after the run: $LOAD_AFTER"
  python3 bench/cpu/report.py "$RAW" "$OUT/cpu-$LABEL.md" "$OUT/cpu-$LABEL.png" \
    "sh bench/cpu/run.sh $LABEL $SEQS $REPS   # THREADS=$THREADS H=$H D=$D BENCH_LOGIT_STD=${BENCH_LOGIT_STD:-1}" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $NPROC cores ($LABEL)" | grep -E '^(plot|no plot)' 
  printf '%s\n' "Load average (1, 5, 15 min) before the run: $LOAD_BEFORE; after: $LOAD_AFTER. Other work on" \
    "the machine lowers both the peak and the kernels; compare numbers of one run only." "" >> "$OUT/cpu-$LABEL.md"
  cat "$OUT/cpu-$LABEL.md"
else
  echo "no python3: raw results in $RAW, no table or plot"
fi
