#!/usr/bin/env bash
# The GPU check of a change that must not change behaviour (issue 32's pruning: kernels v3 and v5,
# the A/B knobs, one descriptor and one staging helper): the GPU tests with the default choice and
# with each kept forward version forced, the backward's battery, then compare_builds.sh, the
# forward's output and lse bit for bit against a build of the base commit (every kept version, both
# precisions, padded and odd shapes). Runs carried binaries (nothing is built here):
#   on the development machine:
#     CARRY_TESTS="test_parity test_padding test_cuda_device test_edges test_backward" \
#       lab/gpu/carry.sh ba78e2f          (.carry/build: this tree; .carry/base/jattn: ba78e2f)
#   on the GPU machine, from the repository root (carry .carry):
#     OUT=$OUT bash lab/gpu/prune_check.sh
#   STEPS="tests forced backward ab" (the default: all; about 6-10 minutes: split over two calls
#   with STEPS="tests forced" and STEPS="backward ab" where a call is capped at 10 minutes)
# Logs under OUT (default /tmp/prune-out); a table last. Exit status 0 when every step passed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/prune-out}
B=${BUILD:-.carry/build}
BASE=${BASE:-.carry/base/jattn}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export JATTN_TEST_QUICK=1 # the parity suite without its (24,1536,128) shape
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
STEPS=${STEPS:-"tests forced backward ab"}
has() { [[ " $STEPS " == *" $1 "* ]]; }
rows=()
status=0

# step NAME TIMEOUT_S COMMAND...: runs it, logs to OUT/NAME.log, adds a row (rc, last summary line)
step() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local line
  line=$(grep -E "passed|identical|DIFF|FAIL" "$OUT/$name.log" | tail -1 | cut -c1-90)
  rows+=("| $name | $rc | ${line:-} |")
  [ "$rc" -eq 0 ] || status=1
}

if has tests; then
  step cuda_device 120 "$B/tests/test_cuda_device"
  step edges 120 "$B/tests/test_edges" cuda
  step padding 120 "$B/tests/test_padding" cuda
  step parity 150 "$B/tests/test_parity" cuda
fi
for v in $(has forced && echo v1 v4 v6 v7); do # a forced version refuses other head dims: UNSUPPORTED lines are not failures
  JATTN_CUDA_KERNEL=$v timeout 150 "$B/tests/test_parity" cuda > "$OUT/parity_$v.log" 2>&1
  other=$(grep -E "^FAIL" "$OUT/parity_$v.log" | grep -vc JATTN_ERROR_UNSUPPORTED)
  rows+=("| parity $v forced | $other failures other than refusals | $(tail -1 "$OUT/parity_$v.log" | cut -c1-60) |")
  [ "$other" -eq 0 ] || status=1
done
has backward && step backward 300 "$B/tests/test_backward" cuda
if ! has ab; then
  :
elif [ -x "$BASE" ]; then
  step ab_forward 300 sh bench/gpu/compare_builds.sh "$B/tools/jattn" "$BASE"
  rows+=("| ab_forward cases | $(grep -c '^same' "$OUT/ab_forward.log") same, $(grep -c '^DIFF' "$OUT/ab_forward.log") DIFF | (compare_builds.sh) |")
else
  rows+=("| ab_forward | skipped | no base build at $BASE |")
fi

echo "| step | rc | summary |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}" | tee "$OUT/table.md"
exit $status
