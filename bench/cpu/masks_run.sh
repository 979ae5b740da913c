#!/bin/sh
# The cpu backend's masks and grouped-query heads beside the calls they should match, and PyTorch's
# CPU SDPA on the same cases: bench_masks (interleaved, call by call) and torch_cpu_masks.py on 1
# and 2 threads, forward and backward; then `jattn run` on the FLUX shape with each mask (the
# command's own report: attended-pair GFLOP/s, checked against the reference).
#
# usage: sh bench/cpu/masks_run.sh BUILD_DIR OUT_DIR [H] [REPS]
#   BUILD_DIR holds bench/bench_masks and tools/jattn; OUT_DIR receives one file per run and
#   commands.txt. PyTorch: JATTN_BENCH_PYTHON (a python3 with torch), else python3; skipped
#   (said so in the file) without torch. H default 8 (the ratios are per head), REPS default 7
#   (PyTorch at S = 4608: 3, its causal case only: it runs ~4x slower than jattn there).
set -u
B=$(cd "${1:?build dir}" && pwd)
mkdir -p "${2:?out dir}"
OUT=$(cd "$2" && pwd)
H=${3:-8}
REPS=${4:-7}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=${JATTN_BENCH_PYTHON:-python3}
log() { echo "$*" >> "$OUT/commands.txt"; }
: > "$OUT/commands.txt"
log "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) $(nproc) cpus"
log "# load: $(cut -d' ' -f1-3 /proc/loadavg); git $(cd "$SRC" && git rev-parse --short HEAD)"
jb() { # threads S reps cases...
  t=$1 S=$2 r=$3; shift 3
  log "bench/bench_masks $t $r $H $S 128 both $* > bench_masks_t${t}_s${S}.jsonl"
  nice -n 5 "$B/bench/bench_masks" "$t" "$r" "$H" "$S" 128 both "$@" > "$OUT/bench_masks_t${t}_s${S}.jsonl" 2>&1
}
tb() { # threads S reps cases...
  t=$1 S=$2 r=$3; shift 3
  log "$PY bench/cpu/torch_cpu_masks.py $t $r $H $S 128 both $* > torch_t${t}_s${S}.jsonl"
  nice -n 5 "$PY" "$SRC/bench/cpu/torch_cpu_masks.py" "$t" "$r" "$H" "$S" 128 both "$@" > "$OUT/torch_t${t}_s${S}.jsonl" 2>&1
}
jb 1 1536 "$REPS"
jb 1 4608 "$REPS" causal segments
jb 2 1536 "$REPS"
jb 2 4608 5 causal
tb 1 1536 "$REPS"
tb 1 4608 3 causal
tb 2 1536 "$REPS"
# the command on the FLUX shape (B 1, H 24, S 1536, D 128), 2 threads
for m in "" "--causal" "--kv-heads 6" "--segments 512,512,512"; do
  for bwd in "" "--backward"; do
    name=$(echo "run $m $bwd" | tr -s ' -' '_' | sed 's/_$//')
    log "tools/jattn run --backend cpu --threads 2 --json $m $bwd > $name.json"
    # shellcheck disable=SC2086
    nice -n 5 "$B/tools/jattn" run --backend cpu --threads 2 --json $m $bwd > "$OUT/$name.json" 2>&1
  done
done
log "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
