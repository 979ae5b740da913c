#!/bin/sh
# The cpu backend on the GPU machine's Xeon (issue 31), in one device call, ~3-4 minutes:
#   1. builds this tree's library CPU-only with the benchmarks (/tmp/jattn-xeon) and, when git
#      history is here, the base commit's ($BASE, default ba78e2f: before the Intel work) beside
#      it (/tmp/jattn-xeon-base), in parallel;
#   2. the AVX-512 FMA peak of one thread (lab/cpu/fma_peak_cputime.c);
#   3. bench/cpu/loop_lab: the hot loops one by one and the forward task of each tile variant
#      (the library's table in full, loop_lab's own instances task lines only), the core clock;
#   4. bench/cpu/interleaved.py: jattn (base, this tree) and PyTorch's CPU SDPA alternated call by
#      call in one process: forward (1,24,1536,128) and (1,8,4608,128) (heads cut from 24 to 8
#      for time: the per-head work and cache behaviour are the same), backward (1,24,1536,128),
#      each on 1 and 2 threads pinned to distinct physical cores (taskset, OMP_PROC_BIND);
#   5. bench/cpu/hash_compare.sh: out, lse, dq, dk, dv of base and this tree bit for bit (avx512);
#   6. lab/cpu/amx_split.c: the AMX bf16-split product beside the FMA peak (skips without AMX).
# Prints a short table last (lab/cpu/xeon_summary.py); everything under $OUT (default
# /tmp/xeon-out). Installs nothing; needs cc, cmake, python3 with torch and numpy.
#
# usage (repository root): sh lab/cpu/xeon_run.sh
# env: OUT, BASE (a commit, or "none"), ROUNDS (interleaved rounds after a warm-up, default 4),
#      JOBS (build jobs, default nproc), PYTHON (default python3: the one with torch)
set -u
OUT=${OUT:-/tmp/xeon-out}
BASE=${BASE:-ba78e2f}
ROUNDS=${ROUNDS:-4}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
PY=${PYTHON:-python3}
B=/tmp/jattn-xeon
BB=/tmp/jattn-xeon-base
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "cpuid family/model: $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')/$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
  echo "logical cpus: $(nproc)"
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_bf16|amx_tile|amx_bf16|amx_int8)$' | tr '\n' ' ')"
  echo "load: $(cat /proc/loadavg)"
  echo "cc: $(cc --version 2>&1 | head -1)"
  echo "python: $("$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)' 2>&1 | tail -1)"
  echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git status --porcelain 2>/dev/null | grep -q . && echo ' (with changes)')"
} | tee "$OUT/machine.txt"

# ---- physical cores: the first logical CPU of each core ------------------------------------
CORES=$(for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do
  cut -d, -f1 "$f" | cut -d- -f1
done 2>/dev/null | sort -un | tr '\n' ' ')
C1=$(echo "$CORES" | awk '{print $1}')
C2=$(echo "$CORES" | awk '{print $1 "," $2}')
if command -v taskset >/dev/null 2>&1 && [ -n "$C1" ] && [ "$C2" != "$C1," ]; then
  PIN1="taskset -c $C1"
  PIN2="taskset -c $C2"
else
  PIN1="" PIN2=""
fi
echo "physical cores (first logical CPU of each): $CORES; 1 thread on ${C1:-?}, 2 on ${C2:-?} ${PIN1:+(taskset)}" |
  tee -a "$OUT/machine.txt"
for f in /sys/devices/system/cpu/cpu0/topology/thread_siblings_list /sys/devices/system/cpu/cpu1/topology/thread_siblings_list; do
  [ -r "$f" ] && echo "$f: $(cat "$f")" >> "$OUT/machine.txt"
done

# ---- 1. builds ----------------------------------------------------------------------------
stamp "building this tree and the base ($BASE)"
HALF=$(((JOBS + 1) / 2))
(cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_BUILD_TESTS=OFF -DJATTN_BUILD_BENCH=ON &&
  cmake --build "$B" -j "$HALF" --target jattn_shared loop_lab) > "$OUT/build.log" 2>&1 &
PID_NEW=$!
HAVE_BASE=0
if [ "$BASE" != none ] && git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  rm -rf "$BB-src" && mkdir -p "$BB-src" && git archive "$BASE" | tar -x -C "$BB-src" &&
    (cmake -S "$BB-src" -B "$BB" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_BUILD_TESTS=OFF &&
      cmake --build "$BB" -j "$HALF" --target jattn_shared) > "$OUT/build-base.log" 2>&1 && HAVE_BASE=1
else
  echo "base: skipped (BASE=$BASE, or no git history in this copy)" | tee -a "$OUT/machine.txt"
fi
wait $PID_NEW || { echo "build failed:"; tail -30 "$OUT/build.log"; exit 1; }
cc -O2 -mavx512f -mfma lab/cpu/fma_peak_cputime.c -o "$B/fma_peak" 2>> "$OUT/build.log"
cc -O2 -std=c11 lab/cpu/amx_split.c -lm -o "$B/amx_split" 2>> "$OUT/build.log"
LIBS="$B/libjattn.so"
[ $HAVE_BASE = 1 ] && LIBS="$BB/libjattn.so $B/libjattn.so"
stamp "built (base: $HAVE_BASE)"

# ---- 2. FMA peak --------------------------------------------------------------------------
$PIN1 "$B/fma_peak" 7 | tee "$OUT/fma_peak.txt"

# ---- 3. the loops one by one ---------------------------------------------------------------
stamp "loop_lab"
{
  $PIN1 "$B/bench/loop_lab" 9 avx512
  $PIN1 "$B/bench/loop_lab" -t 7 lab-t4x48 lab-t8x48 lab-t6x32 lab-t4x64 lab-t6x64 lab-t8x32 lab-t4x48pf \
    lab-t4x48bk48 lab-t4x48bk192 lab-t4x48db32 | grep -v '^table'
} > "$OUT/loop_lab.txt" 2>&1
cat "$OUT/loop_lab.txt"

# ---- 4. jattn and PyTorch alternated ------------------------------------------------------
run_il() { # mode heads seq threads
  pin=$PIN1
  [ "$4" = 2 ] && pin=$PIN2
  stamp "interleaved $1 H=$2 S=$3 threads=$4"
  OMP_PROC_BIND=true $pin "$PY" bench/cpu/interleaved.py "$1" "$2" "$3" "$4" "$ROUNDS" $LIBS \
    > "$OUT/il-$1-$2-$3-$4.txt" 2>&1
  tail -n "$(($(echo $LIBS | wc -w) + 1))" "$OUT/il-$1-$2-$3-$4.txt"
}
for t in 1 2; do
  run_il fwd 24 1536 $t
  run_il fwd 8 4608 $t
  run_il bwd 24 1536 $t
done

# ---- 5. bits: base against this tree ------------------------------------------------------
if [ $HAVE_BASE = 1 ]; then
  stamp "hashes"
  sh bench/cpu/hash_compare.sh "$BB" "$B" avx512 1,2 > "$OUT/hashes.txt" 2>&1
  cat "$OUT/hashes.txt"
fi

# ---- 6. AMX --------------------------------------------------------------------------------
stamp "amx_split"
$PIN1 "$B/amx_split" 5 > "$OUT/amx_split.txt" 2>&1
cat "$OUT/amx_split.txt"

stamp "done"
"$PY" lab/cpu/xeon_summary.py "$OUT" | tee "$OUT/summary.md"
