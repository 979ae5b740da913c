#!/usr/bin/env bash
# Kernel v6 through the library on the GPU machine, one call (issue 23), with the binaries that
# lab/gpu/carry.sh built on the development machine (PACK=1: carry.tgz beside this tree):
#   bench  v4 and v6 (f32, tf32) beside PyTorch SDPA at the issue's shapes, cross-attention
#          (4096 queries, 512 keys) and D = 64; the sass counts
#   padding  key padding beside the unpadded call at (1,24,4608,128) (bench/padding/run.sh)
#   tests  the GPU tests on the default choice (AUTO: v6 wherever it takes the problem), then
#          with v6 forced (the forced pass also runs v6 where AUTO's walk would pick another)
#   tail   the single-row peaky tail, 1000 draws, D 128 and 64, v6 and v4 on the same draws
#   sanitize  compute-sanitizer's four tools over small v6 calls (jattn run, forced v6:
#          D 128 f32 key-padded with odd sizes, D 64 tf32, D 128 with a row of no keys)
# Each step has its own time cap (measured 2026-12-01: bench 70 s, padding 33 s, tests 9 s, quick
# forced tests 5 s, each accuracy_tail run ~30 s, sanitizers 9 s), so that a slow one costs only
# itself; logs under $OUT/r,
# packed into $OUT/results.tgz; a summary last.
# usage (GPU machine, from the folder holding bench/ and carry.tgz): bash lab/gpu/v6_library_run.sh
set -u
cd "$(dirname "$0")/../.."
tar xzf carry.tgz
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=.carry/build
R=${OUT:-/tmp/v6lib}/r
mkdir -p "$R"
S="1,24,1536,128 1,24,4608,128 1,48,4608,128 1,24,16384,128 1,40,32768,128 1,24,4096,512,128 1,24,1536,64 1,24,4608,64"
step() {
  local name=$1 cap=$2; shift 2
  echo "== step $name (cap ${cap} s) $(date +%T)"
  SECONDS=0
  timeout "$cap" env OUT="$R" BUILD="$B" "$@" > "$R/step_$name.log" 2>&1
  echo "== step $name rc=$? ${SECONDS} s"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$R/smi.txt"
step bench 105 JATTN_GPU_STEPS="sass bench" JATTN_BENCH_VERSIONS=v4,v6 JATTN_GPU_SHAPES="$S" bash bench/gpu/run.sh
step padding 40 JATTN_GPU_STEPS="padding" JATTN_PADDING_ROUNDS=3 bash bench/gpu/run.sh
step tests 60 JATTN_GPU_STEPS="test" JATTN_TEST_KERNELS="auto v6" bash bench/gpu/run.sh
step tail 130 JATTN_GPU_STEPS="tail" JATTN_TAIL_KERNELS="v6 v4" JATTN_TAIL_D1_DRAWS=2000 bash bench/gpu/run.sh
san() {
  for tool in memcheck racecheck synccheck initcheck; do
    for args in "--dim 128 --batch 2 --heads 2 --seq 200 --seq-kv 333 --kv-len 333,130" \
                "--dim 64 --batch 1 --heads 3 --seq 130 --seq-kv 77 --precision tf32" \
                "--dim 128 --batch 2 --heads 1 --seq 65 --seq-kv 100 --kv-len 0,100"; do
      # shellcheck disable=SC2086
      JATTN_CUDA_KERNEL=v6 compute-sanitizer --tool $tool --error-exitcode 3 $B/tools/jattn run --backend cuda --reps 1 $args \
        > /tmp/san.txt 2>&1
      echo "$tool [$args]: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.txt | tail -1) $(grep -E '^kernel|parity' /tmp/san.txt | tr -s ' ' | cut -c1-90 | tr '\n' ' ')"
    done
  done
}
echo "== step sanitize $(date +%T)"; SECONDS=0
export -f san; export B
timeout 55 bash -c san > "$R/sanitize.log" 2>&1; echo "== step sanitize rc=$? ${SECONDS} s"
tar czf "${OUT:-/tmp/v6lib}/results.tgz" -C "$R" .
echo "==== summary"
grep -ahE "rc=|refusals" "$R/step_tests.log" | cut -c1-160
grep -ahE ": TAIL|tail seed" "$R/step_tail.log" | cut -c1-200
cut -c1-150 "$R/sanitize.log"
grep -aA8 "^| variant" "$R/step_padding.log"
sed -n '/^| (B,H,S,D)/,$p' "$R/step_bench.log" | grep -aE "B,H,S,D|---|v4-f32|v6|sdpa-f32"
