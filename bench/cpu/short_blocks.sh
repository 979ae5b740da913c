#!/bin/sh
# jattn's cpu backend beside PyTorch's CPU SDPA (when importable) at cross-attention and
# short-query shapes, 1 and 2 threads, medians; and the float32 accuracy tail of the one-column
# case (D = 1, uniform) beside the float32 floor. Prints a markdown report.
# usage (repository root, after `make`): sh bench/cpu/short_blocks.sh [BUILD]   (default build)
set -u
BUILD=${1:-build}
J=$BUILD/tools/jattn
SHAPES="10:4096:77:64 24:4096:77:128 24:77:4096:128 24:8:4096:128 24:1:4096:128"
echo "# Short query blocks and cross-attention, cpu backend ($(uname -m), $(nproc) cores)"
echo
echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null). Command: \`sh bench/cpu/short_blocks.sh\`"
echo
echo "| (H, Sq, Skv, D) | threads | jattn ms | PyTorch ms | jattn / PyTorch |"
echo "| --- | ---: | ---: | ---: | ---: |"
for t in 1 2; do
  for s in $SHAPES; do
    IFS=: read -r H SQ SKV D <<SHAPE
$s
SHAPE
    jm=$($J run --backend cpu --threads $t --heads $H --seq $SQ --seq-kv $SKV --dim $D --reps 15 --no-check --json |
      python3 -c "import sys,json; print('%.3f' % json.loads(sys.stdin.read())['ms'])")
    tm=$(python3 - "$t" "$H" "$SQ" "$SKV" "$D" <<'PY' 2>/dev/null || echo -
import statistics, sys, time
import torch
import torch.nn.functional as F
t, H, Sq, Skv, D = (int(x) for x in sys.argv[1:])
torch.set_num_threads(t)
q, k, v = torch.randn(1, H, Sq, D), torch.randn(1, H, Skv, D), torch.randn(1, H, Skv, D)
with torch.no_grad():
    F.scaled_dot_product_attention(q, k, v)
    ts = []
    for _ in range(15):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        ts.append(time.perf_counter() - t0)
print("%.3f" % (statistics.median(ts) * 1e3))
PY
)
    ratio=$(python3 -c "print('%.2fx' % ($tm / $jm))" 2>/dev/null || echo -)
    echo "| ($H, $SQ, $SKV, $D) | $t | $jm | $tm | $ratio |"
  done
done
echo
echo "Accuracy tail, B=1 H=1 Sq=100 Skv=77 D=1 uniform, f32 (gate rel_l2 <= 2e-6):"
echo
echo '```'
cmake -S . -B "$BUILD" -DJATTN_BUILD_BENCH=ON >/dev/null && cmake --build "$BUILD" --target accuracy_tail >/dev/null &&
  "$BUILD/bench/accuracy_tail" cpu 1 1 100 77 1 uniform 30000 | grep TAIL
python3 bench/accuracy/fp32_floor.py 100 77 1 40000 1 2>/dev/null || echo "fp32_floor: needs numpy"
echo '```'
