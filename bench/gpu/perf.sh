#!/usr/bin/env bash
# The speed of the cuda backend and of the Python package beside PyTorch, in one call on one H100 or
# H200, from the repository root (the issues' targets: 35's variants, 36's backward, autograd step and
# host cost):
#
#   OUT=$OUT bash bench/gpu/perf.sh          (with .whl/ carried when STEPS has "train": diffusers' wheel)
#
# Steps (STEPS, default "build flux portable masks python train"; each capped):
#   build     cmake (JATTN_CUDA=ON, JATTN_CUDA_ARCHS=90a) of the command and the shared library in $BUILD,
#             unless $BUILD/tools/jattn is there already (the battery's build, on a machine still warm)
#   flux      (1,24,S,128) S = 1536, 4608, 16384 and (1,24,4608,64): jattn's forward and backward (AUTO),
#             `jattn run --json` (CUDA events, median); PyTorch's fp32 SDPA forward and backward
#             (torch_sdpa_backward.py). Ratios: backward / forward, PyTorch / jattn
#   portable  the backward v3 and the forward v7 forced (JATTN_CUDA_BWD_KERNEL=v3, JATTN_CUDA_KERNEL=v7: what
#             every GPU but Hopper runs) at (1,16,4096,72), (1,24,4096,96), (1,24,4608,128), (1,12,4096,256),
#             beside PyTorch's backward and forward
#   masks     causal vs the plain call (jattn and SDPA is_causal), and one segment of every token (the masked
#             instances on full tiles: what a tile costs them against the plain call), grouped-query heads (32 query heads,
#             8 key/value heads) vs SDPA enable_gqa, packed sequences (4 x 1152 tokens in one row) vs the
#             same tokens as a padded batch (jattn, and SDPA with a key mask): forward, and the backward
#   python    bench/python/host_cost.py --device cuda: the host time to enqueue a forward and a forward +
#             backward through jattn.attention, synchronised and looped steps, small shapes, beside SDPA
#   train     bench/python/flux2_train_step.py --modes $TRAIN_MODES (default eager; "eager compile" for
#             torch.compile too, with CAP_TRAIN raised): a FLUX.2 training step (24 heads of 128)
#             through jattn.diffusers against SDPA, its gradients against the float64 step
# Writes $OUT/perf.md (the tables, printed last), $OUT/perf.jsonl, and the logs.
set -u
OUT=${OUT:-/tmp/perf}
BUILD=${BUILD:-$PWD/build-gpu}
STEPS=${STEPS:-"build flux portable masks python train"}
ROOT=$PWD
mkdir -p "$OUT"
has() { [[ " $STEPS " == *" $1 "* ]]; }
SECONDS=0
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/machine.txt" 2>&1
echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)}" >> "$OUT/machine.txt"
cat "$OUT/machine.txt"

if has build && [ ! -x "$BUILD/tools/jattn" ]; then
  timeout -k 10 200 bash -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a \
    -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > /dev/null && cmake --build '$BUILD' -j $(nproc) --target jattn jattn_shared" \
    > "$OUT/build.log" 2>&1
  echo "build rc $? after ${SECONDS} s"
fi
J=$BUILD/tools/jattn
[ -x "$J" ] || { echo "no $J: build failed"; tail -20 "$OUT/build.log"; exit 1; }
ROWS=$OUT/perf.jsonl
: > "$ROWS"

# jrun TAG [ENV=...] -- ARGS...: one `jattn run --json` on cuda (no check: the tests check), its ms as a row
jrun() {
  local tag=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local line
  line=$(timeout -k 5 90 env "${envs[@]}" "$J" run --backend cuda --no-check --json "$@" 2>> "$OUT/jattn.err" | tail -1)
  python3 - "$tag" "$line" >> "$ROWS" << 'EOF'
import json, sys
tag, line = sys.argv[1], sys.argv[2]
try:
    r = json.loads(line)
    print(json.dumps({"tag": tag, "who": "jattn", "ms": r.get("ms"), "kernel": r.get("kernel"), "gflops": r.get("gflops")}))
except Exception:
    print(json.dumps({"tag": tag, "who": "jattn", "ms": None, "error": line[:200]}))
EOF
}
# trow TAG LINE: a PyTorch row from a "RESULT ..." line's ms field (field N)
trow() {
  python3 -c 'import json,sys; print(json.dumps({"tag": sys.argv[1], "who": "torch", "ms": float(sys.argv[2]) if sys.argv[2] else None}))' "$1" "$2" >> "$ROWS"
}

if has flux; then
  for s in "1,24,1536,128" "1,24,4608,128" "1,24,16384,128" "1,24,4608,64"; do
    IFS=, read -r b h n d <<< "$s"
    jrun "fwd $s" -- --batch "$b" --heads "$h" --seq "$n" --dim "$d"
    jrun "bwd $s" -- --batch "$b" --heads "$h" --seq "$n" --dim "$d" --backward
  done
  timeout -k 5 200 python3 "$ROOT/bench/gpu/torch_sdpa_backward.py" 1,24,1536,128 1,24,4608,128 1,24,16384,128 1,24,4608,64 \
    > "$OUT/torch_flux.log" 2>&1
  while read -r _ mode b h n d ms _; do
    case $mode in forward) trow "fwd $b,$h,$n,$d" "$ms" ;; backward-default) trow "bwd $b,$h,$n,$d" "$ms" ;; esac
  done < <(grep '^RESULT' "$OUT/torch_flux.log")
  echo "flux done after ${SECONDS} s"
fi

if has portable; then
  for s in "1,16,4096,72" "1,24,4096,96" "1,24,4608,128" "1,12,4096,256"; do
    IFS=, read -r b h n d <<< "$s"
    jrun "v3 $s" JATTN_CUDA_BWD_KERNEL=v3 -- --batch "$b" --heads "$h" --seq "$n" --dim "$d" --backward
    jrun "v7 $s" JATTN_CUDA_KERNEL=v7 -- --batch "$b" --heads "$h" --seq "$n" --dim "$d"
  done
  timeout -k 5 150 python3 "$ROOT/bench/gpu/torch_sdpa_backward.py" 1,16,4096,72 1,24,4096,96 1,12,4096,256 \
    > "$OUT/torch_portable.log" 2>&1
  while read -r _ mode b h n d ms _; do
    [ "$mode" = backward-default ] && trow "v3 $b,$h,$n,$d" "$ms"
    [ "$mode" = forward ] && trow "v7 $b,$h,$n,$d" "$ms"
  done < <(grep '^RESULT' "$OUT/torch_portable.log")
  echo "portable done after ${SECONDS} s"
fi

if has masks; then
  P="$ROOT/bench/gpu/torch_sdpa_variants.py"
  for d in 128 72; do
    s="1,24,4608,$d"
    jrun "plain $s" -- --heads 24 --seq 4608 --dim "$d"
    jrun "causal $s" -- --heads 24 --seq 4608 --dim "$d" --causal
    # one segment of every token: the masked instances on full tiles only (their per-tile cost against the plain one)
    jrun "one-segment $s" -- --heads 24 --seq 4608 --dim "$d" --segments 4608
    jrun "plain-bwd $s" -- --heads 24 --seq 4608 --dim "$d" --backward
    jrun "causal-bwd $s" -- --heads 24 --seq 4608 --dim "$d" --causal --backward
    for v in plain causal; do
      r=$(timeout -k 5 60 python3 "$P" "$v" "$s" 2>> "$OUT/torch_masks.log" | awk '/^RESULT/{print $5}')
      trow "$v $s" "$r"
      r=$(timeout -k 5 60 python3 "$P" "$v" "$s" --backward 2>> "$OUT/torch_masks.log" | awk '/^RESULT/{print $5}')
      trow "$v-fwdbwd $s" "$r"
    done
  done
  # the portable backward (what every GPU but Hopper runs for every call, and Hopper for masked ones)
  jrun "causal-bwd-v3 1,24,4608,128" JATTN_CUDA_BWD_KERNEL=v3 -- --heads 24 --seq 4608 --dim 128 --causal --backward
  jrun "plain-bwd-v3 1,24,4608,128" JATTN_CUDA_BWD_KERNEL=v3 -- --heads 24 --seq 4608 --dim 128 --backward
  for bw in "" "--backward"; do
    t=${bw:+-bwd}
    jrun "gqa$t 1,32,8,4096,128" -- --heads 32 --kv-heads 8 --seq 4096 --dim 128 $bw
    jrun "mha$t 1,32,32,4096,128" -- --heads 32 --seq 4096 --dim 128 $bw
    r=$(timeout -k 5 60 python3 "$P" gqa 1,32,8,4096,128 $bw 2>> "$OUT/torch_masks.log" | awk '/^RESULT/{print $5}')
    trow "gqa${bw:+-fwdbwd} 1,32,8,4096,128" "$r"
    jrun "packed$t 24,128,4x1152" -- --heads 24 --dim 128 --segments 1152,1152,1152,1152 $bw
    jrun "padded$t 24,128,4x1152" -- --batch 4 --heads 24 --seq 1152 --dim 128 $bw
    r=$(timeout -k 5 60 python3 "$P" padded 24,128,1152+1152+1152+1152 $bw 2>> "$OUT/torch_masks.log" |
      awk '/^RESULT/{print $5}')
    trow "padded${bw:+-fwdbwd} 24,128,4x1152" "$r"
  done
  echo "masks done after ${SECONDS} s"
fi

# The Python package: python/src with this build's library (as the battery runs it), diffusers from .whl
PKG=$(mktemp -d)
L=$(find "$BUILD" -maxdepth 2 -name 'libjattn.so*' -type f | head -1)
cp -r "$ROOT/python/src/jattn" "$PKG/jattn" && mkdir -p "$PKG/jattn/_lib" && cp "$L" "$PKG/jattn/_lib/libjattn.so"
cc -I"$ROOT/include" "$ROOT/tests/abi/jattn_abi_probe.c" -o "$PKG/abi_probe" && "$PKG/abi_probe" > "$PKG/jattn/_lib/abi_probe.txt"
if ls "$ROOT"/.whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$PKG" "$ROOT"/.whl/*.whl > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH=$PKG
if has python; then
  timeout -k 5 200 python3 "$ROOT/bench/python/host_cost.py" --device cuda --json "$OUT/host.jsonl" > "$OUT/host.md" 2>&1
  echo "python host cost rc $? after ${SECONDS} s"
fi
if has train; then
  PYTHONPATH=$PKG:$ROOT/python/tests timeout -k 5 "${CAP_TRAIN:-200}" python3 "$ROOT/bench/python/flux2_train_step.py" \
    --modes ${TRAIN_MODES:-eager} --reps 3 --json "$OUT/train.jsonl" > "$OUT/train.md" 2>&1
  echo "train rc $? after ${SECONDS} s"
fi

python3 - "$ROWS" > "$OUT/perf.md" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ms = {}
for r in rows:
    ms[(r["tag"], r["who"])] = r.get("ms")
def g(tag, who):
    return ms.get((tag, who))
def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"
def f(x):
    return f"{x:.3f}" if x else "-"
print("### Forward and backward (AUTO), PyTorch fp32 SDPA in the same call (ms)\n")
print("| (B,H,S,D) | jattn fwd | jattn bwd | bwd / fwd | PyTorch fwd | PyTorch bwd | PyTorch / jattn fwd | PyTorch / jattn bwd |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for s in ["1,24,1536,128", "1,24,4608,128", "1,24,16384,128", "1,24,4608,64"]:
    jf, jb, tf, tb = g("fwd " + s, "jattn"), g("bwd " + s, "jattn"), g("fwd " + s, "torch"), g("bwd " + s, "torch")
    print(f"| ({s}) | {f(jf)} | {f(jb)} | {ratio(jb, jf)} | {f(tf)} | {f(tb)} | {ratio(tf, jf)} | {ratio(tb, jb)} |")
# the portable kernels forced; PyTorch's row from the portable step, else the flux step's same shape
for tag, flux, what in (("v3", "bwd", "backward (v3 forced)"), ("v7", "fwd", "forward (v7 forced)")):
    print(f"\n### The portable {what} against PyTorch's fp32 {what.split()[0]} (ms)\n")
    print(f"| (B,H,S,D) | jattn {tag} | PyTorch | PyTorch / jattn |")
    print("| --- | ---: | ---: | ---: |")
    for s in ["1,16,4096,72", "1,24,4096,96", "1,24,4608,128", "1,12,4096,256"]:
        j, t = g(f"{tag} {s}", "jattn"), g(f"{tag} {s}", "torch") or g(f"{flux} {s}", "torch")
        print(f"| ({s}) | {f(j)} | {f(t)} | {ratio(t, j)} |")
print("\n### Masks and grouped heads (ms)\n")
print("| what | jattn | jattn plain | jattn / plain | PyTorch | PyTorch / jattn |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for d in ["128", "72"]:
    s = f"1,24,4608,{d}"
    c, p = g("causal " + s, "jattn"), g("plain " + s, "jattn")
    print(f"| causal fwd ({s}) | {f(c)} | {f(p)} | {ratio(c, p)} | {f(g('causal ' + s, 'torch'))} | {ratio(g('causal ' + s, 'torch'), c)} |")
    cb, pb = g("causal-bwd " + s, "jattn"), g("plain-bwd " + s, "jattn")
    cfb = (c + cb) if c and cb else None
    print(f"| causal bwd ({s}) | {f(cb)} | {f(pb)} | {ratio(cb, pb)} | fwd+bwd {f(g('causal-fwdbwd ' + s, 'torch'))} | {ratio(g('causal-fwdbwd ' + s, 'torch'), cfb)} (fwd+bwd) |")
q, m = g("gqa 1,32,8,4096,128", "jattn"), g("mha 1,32,32,4096,128", "jattn")
print(f"| GQA 32/8 heads fwd (1,4096,128) | {f(q)} | MHA {f(m)} | {ratio(q, m)} | {f(g('gqa 1,32,8,4096,128', 'torch'))} | {ratio(g('gqa 1,32,8,4096,128', 'torch'), q)} |")
pk, pd = g("packed 24,128,4x1152", "jattn"), g("padded 24,128,4x1152", "jattn")
print(f"| packed 4x1152 fwd (24 heads, 128) | {f(pk)} | padded batch {f(pd)} | {ratio(pk, pd)} | padded {f(g('padded 24,128,4x1152', 'torch'))} | {ratio(g('padded 24,128,4x1152', 'torch'), pk)} |")
cv, pv = g("causal-bwd-v3 1,24,4608,128", "jattn"), g("plain-bwd-v3 1,24,4608,128", "jattn")
print(f"| causal bwd, v3 forced (1,24,4608,128) | {f(cv)} | {f(pv)} | {ratio(cv, pv)} | - | - |")
q, m = g("gqa-bwd 1,32,8,4096,128", "jattn"), g("mha-bwd 1,32,32,4096,128", "jattn")
qf = g("gqa 1,32,8,4096,128", "jattn")
tq = g("gqa-fwdbwd 1,32,8,4096,128", "torch")
print(f"| GQA 32/8 heads bwd (1,4096,128) | {f(q)} | MHA {f(m)} | {ratio(q, m)} | fwd+bwd {f(tq)} | {ratio(tq, (q + qf) if q and qf else None)} (fwd+bwd) |")
pk, pd = g("packed-bwd 24,128,4x1152", "jattn"), g("padded-bwd 24,128,4x1152", "jattn")
pkf = g("packed 24,128,4x1152", "jattn")
tp = g("padded-fwdbwd 24,128,4x1152", "torch")
print(f"| packed 4x1152 bwd (24 heads, 128) | {f(pk)} | padded batch {f(pd)} | {ratio(pk, pd)} | padded fwd+bwd {f(tp)} | {ratio(tp, (pk + pkf) if pk and pkf else None)} (fwd+bwd) |")
EOF
echo
[ -s "$OUT/host.md" ] && { echo "### Python (host_cost.py)"; tail -30 "$OUT/host.md"; }
[ -s "$OUT/train.md" ] && { echo "### FLUX.2 training step (flux2_train_step.py)"; tail -15 "$OUT/train.md"; }
echo
cat "$OUT/perf.md"
echo "done after ${SECONDS} s"
