#!/usr/bin/env bash
# The backward v3's GPU call (issue 29: backward_v3_mma_f16x2.cu, mma.sync 2xFP16), one call from the
# repository root on the GPU machine, under 6 minutes:
#   OUT=$OUT bash lab/gpu/backward_v3_run.sh
# Steps, each under its own cap (seconds):
#   build     cmake (CUDA) in $BUILD (/tmp/jattn-bwd3), targets jattn, test_backward, jattn_shared
#             only [240]
#   test      test_backward cuda with JATTN_CUDA_BWD_KERNEL=v3, its whole battery as nine parts in
#             parallel processes (gate chain padding properties validation determinism tf32 device
#             graph); beside them compute-sanitizer memcheck over the padding part (small key-padded
#             calls, D up to 256) and racecheck over one small jattn run --backward [100]
#   time      at the issue's shapes (1,16,4096,72) (1,24,4096,96) (1,12,4096,256) (1,24,4608,128)
#             (1,24,1536,128): jattn's backward with v3 forced and with AUTO (v2 at D = 128 on a 9.0
#             device), jattn's forward (AUTO), both by `jattn run --json` (device pointers, CUDA events,
#             median); PyTorch's fp32 SDPA forward and backward (default and deterministic,
#             torch_sdpa_backward.py); forward + backward through autograd, jattn.attention (v3 forced)
#             against SDPA in one process (backward_v3_autograd.py) [150]
# Logs under $OUT; the table last ($OUT/table.txt).
set -u
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-/tmp/jattn-bwd3}
mkdir -p "$OUT"
ROOT=$PWD
SHAPES="1,16,4096,72 1,24,4096,96 1,12,4096,256 1,24,4608,128 1,24,1536,128"
step() { echo "== $* ($(date -u +%T))"; }
SECONDS=0
{
  step nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
} > "$OUT/smi.txt" 2>&1

# ---- build ----
{
  step build
  timeout 240 bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON \
      -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > /dev/null &&
    cmake --build '$BUILD' -j \$(nproc) --target jattn test_backward jattn_shared"
  echo "rc $?"
} > "$OUT/build.log" 2>&1
echo "build: $(tail -1 "$OUT/build.log") after ${SECONDS} s"
J=$(find "$BUILD" -type f -name jattn -perm -u+x | head -1)
T=$(find "$BUILD" -type f -name test_backward -perm -u+x | head -1)
L=$(find "$BUILD" -maxdepth 2 -name 'libjattn.so*' -type f | head -1)
if [ -z "$J" ] || [ -z "$T" ]; then
  echo "BUILD FAILED"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1
fi

# ---- tests (v3 forced), sanitizers beside them ----
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export JATTN_CUDA_BWD_KERNEL=v3
pids=""
for part in gate chain padding properties validation determinism tf32 device graph; do
  timeout 100 "$T" cuda "$part" > "$OUT/test_$part.log" 2>&1 &
  pids="$pids $!"
done
timeout 100 "$SAN" --tool memcheck --error-exitcode 3 "$T" cuda padding > "$OUT/memcheck.log" 2>&1 &
pids="$pids $!"
timeout 100 "$SAN" --tool racecheck --error-exitcode 3 "$J" run --backward --backend cuda --heads 2 --seq 130 \
  --seq-kv 77 --dim 72 --reps 1 > "$OUT/racecheck.log" 2>&1 &
pids="$pids $!"
for p in $pids; do wait "$p"; done
{
  for part in gate chain padding properties validation determinism tf32 device graph; do
    echo "$part: $(grep -E '^test_backward' "$OUT/test_$part.log" | tail -1 || true) $(head -1 "$OUT/test_$part.log")"
  done
  echo "memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^test_backward' "$OUT/memcheck.log" | tail -1)"
  echo "racecheck: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
  grep -h -E "^FAIL|^worst|^note" "$OUT"/test_*.log | head -40
} > "$OUT/tests.txt"
echo "tests done after ${SECONDS} s"

# ---- times ----
{
  for s in $SHAPES; do
    IFS=, read -r b h n d <<< "$s"
    r=10; [ "$n" -lt 2048 ] && r=20
    echo "TAG v3"; JATTN_CUDA_BWD_KERNEL=v3 timeout 20 "$J" run --backward --backend cuda --batch "$b" --heads "$h" \
      --seq "$n" --dim "$d" --reps "$r" --no-check --json; echo "rc $?"
    if [ "$d" = 128 ]; then
      echo "TAG auto"; JATTN_CUDA_BWD_KERNEL= timeout 20 "$J" run --backward --backend cuda --batch "$b" --heads "$h" \
        --seq "$n" --dim "$d" --reps "$r" --no-check --json; echo "rc $?"
    fi
    echo "TAG fwd"; timeout 15 "$J" run --backend cuda --batch "$b" --heads "$h" --seq "$n" --dim "$d" --reps "$r" \
      --no-check --json; echo "rc $?"
  done
  echo "TAG check"; JATTN_CUDA_BWD_KERNEL=v3 timeout 30 "$J" run --backward --backend cuda --heads 4 --seq 700 \
    --seq-kv 900 --dim 72 --reps 2 --json; echo "rc $?"
} > "$OUT/bench.log" 2>&1
echo "jattn times done after ${SECONDS} s"
(cd "$ROOT/bench/gpu" && timeout 60 python3 torch_sdpa_backward.py $SHAPES) > "$OUT/torch.log" 2>&1
echo "torch times done after ${SECONDS} s"
PKG=$(mktemp -d)
cp -r "$ROOT/python/src/jattn" "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$L" "$PKG/jattn/_lib/libjattn.so"
PYTHONPATH=$PKG JATTN_CUDA_BWD_KERNEL=v3 timeout 90 python3 "$ROOT/bench/gpu/backward_v3_autograd.py" $SHAPES \
  > "$OUT/autograd.log" 2>&1
echo "autograd done after ${SECONDS} s"

python3 - "$OUT" > "$OUT/table.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
rows, tag = {}, "?"
for line in open(f"{out}/bench.log"):
    if line.startswith("TAG "):
        tag = line.split()[1]
    elif line.startswith("{"):
        j = json.loads(line)
        if tag == "check":
            print("check (1,4,700x900,72) v3:", {k: j.get(k) for k in ("kernel", "dq_rel_l2", "dk_rel_l2", "dv_rel_l2", "pass")})
            continue
        key = (j["batch"], j["heads"], j["seq_q"], j["dim"])
        rows.setdefault(key, {})[tag] = j["ms"]
        if tag in ("v3", "auto"):
            rows[key][tag + "_kernel"] = j.get("kernel", "?")
for line in open(f"{out}/torch.log"):
    if line.startswith("RESULT"):
        f = line.split()
        rows.setdefault(tuple(int(x) for x in f[2:6]), {})["torch " + f[1]] = float(f[6])
for line in open(f"{out}/autograd.log"):
    if line.startswith("RESULT"):
        f = line.split()
        r = rows.setdefault(tuple(int(x) for x in f[1:5]), {})
        r["ag jattn"], r["ag torch"], r["ag rel"] = float(f[5]), float(f[6]), f[10]
nan = float("nan")
print("H200 (nvidia-smi in smi.txt); ms, medians; bwd TFLOP/s = 10 B H S^2 D / time")
print("| (B,H,S,D) | v3 bwd | TF/s | torch bwd | torch/v3 | torch det. / v3 | auto bwd | jattn fwd | torch fwd |"
      " fwd+bwd autograd jattn (v3) / torch | ratio | grads rel |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for key in sorted(rows, key=lambda k: (k[3], k[2])):
    r = rows[key]
    b, h, s, d = key
    g = lambda c: r.get(c, nan)
    v3 = g("v3")
    fl = 10.0 * b * h * s * s * d
    print(f"| {key} | {v3:.3f} | {fl / v3 / 1e9:.1f} | {g('torch backward-default'):.3f} | "
          f"{g('torch backward-default') / v3:.2f}x | {g('torch backward-deterministic') / v3:.2f}x | {g('auto'):.3f} | "
          f"{g('fwd'):.3f} | {g('torch forward'):.3f} | {g('ag jattn'):.3f} / {g('ag torch'):.3f} | "
          f"{g('ag torch') / g('ag jattn'):.2f}x | {r.get('ag rel', '-')} |")
PY
cat "$OUT/tests.txt"
echo "total ${SECONDS} s"
cat "$OUT/table.txt"
