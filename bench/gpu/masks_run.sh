#!/usr/bin/env bash
# The cuda forward's masks and grouped-query heads on the GPU (issue 35), in one call of under six minutes
# on one H100 or H200, from the repository root:
#
#   OUT=$OUT bash bench/gpu/masks_run.sh
#
# Steps (each process under a time cap; the table of results is printed last):
#   build    cmake (JATTN_CUDA=ON, JATTN_CUDA_ARCHS=90a, Release, ptxas -v) in $BUILD, the targets below
#            only, -j$(nproc)                                                                [CAP_BUILD]
#   tests    at once: test_masks cuda (AUTO, then v1, v6, v7 forced: every mask part and grouped heads
#            against the reference), test_cuda_device (device pointers, strides, graphs, masks on every
#            version, non-finite v under a window), test_parity / test_padding cuda (AUTO and v7 forced: no
#            regression), and compute-sanitizer memcheck and racecheck on small masked and unmasked calls
#            of each forward kernel (tests/test_cuda_kernels.c forward, v1, v6, v7 forced)    [CAP_TESTS]
#   timings  the GPU otherwise idle, jattn (`jattn run --json`, device-resident timer, median) and PyTorch's
#            fp32 SDPA (bench/gpu/torch_sdpa_variants.py, perf.sh's peer of the same variants) in the same call: causal (top-left) against the unmasked call and against SDPA is_causal=True;
#            grouped-query heads (32 query heads, 8 key/value heads) against SDPA enable_gqa=True; packed
#            segments against a padded batch of the same tokens (jattn with key lengths, and SDPA with a
#            boolean key mask); at D 128 (v6 on Hopper), 72 and 256 (v7)                    [CAP_TIME]
# Writes under $OUT (default /tmp/masks_run): build.log, ptxas.txt (registers and spills of the forward
# kernels), one log per test, timings.txt (JSON lines), torch.log, table.txt. bench/gpu/perf.sh's "masks"
# step times the same variants at D 128 with the backward too. Knobs: BUILD, STEPS (default
# "build tests timings"), CAP_BUILD CAP_TESTS CAP_TIME (s), SEQ (default 4096).
set -u
OUT=${OUT:-/tmp/masks_run}
BUILD=${BUILD:-/tmp/jattn-masks}
STEPS=${STEPS:-"build tests timings"}
CAP_BUILD=${CAP_BUILD:-170}
CAP_TESTS=${CAP_TESTS:-110}
CAP_TIME=${CAP_TIME:-30}
SEQ=${SEQ:-4096}
ROOT=$PWD
mkdir -p "$OUT"
has() { [[ " $STEPS " == *" $1 "* ]]; }
SECONDS=0
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -1)"
} | tee "$OUT/machine.txt"

T=$BUILD/tests
if has build; then
  timeout -k 10 "$CAP_BUILD" bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON \
      -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF -DCMAKE_CUDA_FLAGS='-Xptxas -v' &&
    cmake --build '$BUILD' -j $(nproc) --target jattn test_masks test_cuda_device test_parity test_padding \
      test_cuda_kernels" > "$OUT/build.log" 2>&1
  echo "build: rc $? after ${SECONDS} s"
  # registers and spills of the forward kernels (ptxas -v)
  awk '/Compiling entry function/{f=$7} /spill/{s=$1" "$5" "$9} /Used [0-9]+ registers/{print f, $5, "regs, stack/spill st/ld", s}' \
    "$OUT/build.log" | grep -E "attention_f32|split_kv" | sed "s/'//g" | (c++filt 2> /dev/null || cat) | sort -u > "$OUT/ptxas.txt"
  grep -c . "$OUT/ptxas.txt" | sed 's/^/ptxas: forward kernel instances: /'
  awk '$(NF-1) != "0" || $NF != "0"' "$OUT/ptxas.txt" | head -20 | sed 's/^/ptxas, spills: /'
fi
if [ ! -x "$T/test_masks" ] || [ ! -x "$BUILD/tools/jattn" ]; then
  echo "BUILD FAILED"
  grep -E "error" "$OUT/build.log" | head -20
  exit 1
fi

if has tests; then
  pids=""
  run() { # NAME VAR=value... COMMAND...: in the background, capped; LOG/NAME.rc gets the exit status
    local name=$1
    shift
    (timeout -k 5 "$CAP_TESTS" env "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc") &
    pids="$pids $!"
  }
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$SAN" ]; then # the slowest first
    for k in v1 v6 v7; do
      for tool in memcheck racecheck; do
        run "san_${tool}_$k" JATTN_CUDA_KERNEL=$k "$SAN" --tool $tool --error-exitcode 3 --print-limit 20 \
          "$T/test_cuda_kernels" forward
      done
    done
  fi
  run test_masks_cuda JATTN_TEST=1 "$T/test_masks" cuda
  for k in v1 v6 v7; do run "test_masks_cuda_$k" JATTN_CUDA_KERNEL=$k "$T/test_masks" cuda parity; done
  run test_cuda_device JATTN_TEST=1 "$T/test_cuda_device"
  for t in test_parity test_padding; do
    run "${t}_cuda" JATTN_TEST=1 "$T/$t" cuda
    run "${t}_cuda_v7" JATTN_CUDA_KERNEL=v7 "$T/$t" cuda
  done
  for p in $pids; do wait "$p"; done
  echo "tests done after ${SECONDS} s"
fi

J=$BUILD/tools/jattn
if has timings; then
  : > "$OUT/timings.txt"
  jrun() { # LABEL ARGS...: one jattn run, its JSON line tagged with LABEL
    local label=$1
    shift
    timeout -k 5 "$CAP_TIME" "$J" run --backend cuda --no-check --reps 20 --json "$@" 2> /dev/null |
      sed "s|^{|{\"label\": \"$label\", |" >> "$OUT/timings.txt"
  }
  S=$SEQ
  for D in 128 72 256; do
    H=$([ "$D" = 256 ] && echo 12 || echo 24)
    jrun "d$D plain" --heads "$H" --seq "$S" --dim "$D"
    jrun "d$D causal" --heads "$H" --seq "$S" --dim "$D" --causal
    jrun "d$D mha32" --heads 32 --seq "$S" --dim "$D"
    jrun "d$D gqa32/8" --heads 32 --kv-heads 8 --seq "$S" --dim "$D"
    jrun "d$D packed" --heads "$H" --dim "$D" --segments $((S / 8)),$((3 * S / 8)),$((S / 4)),$((S / 4))
    jrun "d$D padded" --batch 4 --heads "$H" --seq $((3 * S / 8)) --dim "$D" \
      --kv-len $((S / 8)),$((3 * S / 8)),$((S / 4)),$((S / 4))
  done
  # PyTorch's fp32 SDPA at the same problems (bench/gpu/torch_sdpa_variants.py: CUDA events, median; the
  # kernel it picks), one process per problem
  trun() { # LABEL VARIANT SPEC
    local ms
    ms=$(timeout -k 5 "$CAP_TIME" python3 "$ROOT/bench/gpu/torch_sdpa_variants.py" "$2" "$3" 2>> "$OUT/torch.log" |
      awk '/^RESULT/{print $5}')
    [ -n "$ms" ] && echo "{\"label\": \"$1\", \"ms\": $ms}" >> "$OUT/timings.txt"
  }
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
    for D in 128 72 256; do
      H=$([ "$D" = 256 ] && echo 12 || echo 24)
      trun "sdpa d$D plain" plain "1,$H,$S,$D"
      trun "sdpa d$D causal" causal "1,$H,$S,$D"
      trun "sdpa d$D gqa32/8" gqa "1,32,8,$S,$D"
      trun "sdpa d$D padded" padded "$H,$D,$((S / 8))+$((3 * S / 8))+$((S / 4))+$((S / 4))"
    done
  else
    echo "SKIP: python3 has no torch with CUDA here" > "$OUT/torch.log"
  fi
  echo "timings done after ${SECONDS} s"
fi

# The table: tests, then timings (ms; ratios as the issue states them)
{
  echo "== tests (exit status; the last line of each log)"
  for f in "$OUT"/*.rc; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .rc)
    printf "%-28s rc %-3s %s\n" "$n" "$(cat "$f")" "$(grep -v '^$' "$OUT/$n.log" | tail -1 | cut -c1-90)"
  done
  [ -s "$OUT/timings.txt" ] && python3 - "$OUT/timings.txt" "$SEQ" << 'PY'
import json, sys
S = int(sys.argv[2])
t = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    t[j["label"]] = j
def ms(k): return t[k]["ms"] if k in t else float("nan")
def kern(k): return t.get(k, {}).get("kernel", "-")
print("== timings, ms (jattn: device timer, median of 20; PyTorch: fp32 SDPA, CUDA events, median of 15)")
print("%-6s %-10s %10s %10s %8s  %s" % ("D", "case", "jattn", "sdpa", "x sdpa", "jattn kernel / ratio"))
for D in (128, 72, 256):
    p, c, m, g = ms("d%d plain" % D), ms("d%d causal" % D), ms("d%d mha32" % D), ms("d%d gqa32/8" % D)
    pk, pd = ms("d%d packed" % D), ms("d%d padded" % D)
    sp, sc, sg, sd = (ms("sdpa d%d %s" % (D, x)) for x in ("plain", "causal", "gqa32/8", "padded"))
    print("%-6s %-10s %10.3f %10.3f %8.2f  %s" % (D, "plain", p, sp, sp / p, kern("d%d plain" % D)))
    print("%-6s %-10s %10.3f %10.3f %8.2f  causal/plain %.3f (target <= 0.55)" % (D, "causal", c, sc, sc / c, c / p))
    print("%-6s %-10s %10.3f %10.3f %8.2f  gqa/mha(32 heads) %.3f" % (D, "gqa32/8", g, sg, sg / g, g / m))
    lens = [S // 8, 3 * S // 8, S // 4, S // 4]
    useful = sum(L * L for L in lens) / (max(lens) * sum(lens))  # packed pairs over padded-with-kv_len pairs
    print("%-6s %-10s %10.3f %10.3f %8.2f  per FLOP packed/padded %.3f (padded jattn %.3f ms does %.2fx the pairs)" %
          (D, "packed", pk, sd, sd / pk, (pk / useful) / pd if pd == pd else float("nan"), pd, 1 / useful))
PY
} | tee "$OUT/table.txt"
echo "total ${SECONDS} s"
