#!/usr/bin/env bash
# The Python package on the GPU machine, in one call from the repository root, with .whl/ carried
# (made here by bench/python/build_wheels.sh: the jattn wheel and diffusers' wheel):
#   install the wheels into /tmp/site (no index, no deps: torch, numpy, huggingface_hub, ... are
#   the machine's own) -> python/tests (the GPU tests run; the CPU ones too, on this Python and
#   torch) -> bench_attention.py on cuda (attention beside SDPA, the Python layer's overhead, the
#   FLUX.2 forward with and without jattn) -> the compiled FLUX.2 forward (eager, torch.compile and
#   mode="reduce-overhead", SDPA against the switch, in one run) -> the host cost of a call
#   (host_cost.py: the host time to enqueue a forward and a forward + backward through autograd,
#   synchronised and looped step times, beside SDPA) -> tables LAST.
# usage: bench/python/gpu_run.sh        OUT=dir for the outputs (default build-python-gpu/out):
#        pytest.txt (the tests' report), bench.md (the bench report), bench.jsonl (its rows),
#        compile.md / compile.jsonl (the compiled forwards), host.md / host.jsonl (the host cost)
# env:   JATTN_GPU_PY_STEPS="test bench" (the default; one step a call when the two would not
#        fit a 10-minute call). "compile" is a third step, in a call of its own
#        (JATTN_GPU_PY_STEPS=compile): it compiles the 2+8-block FLUX.2 forward 8 times (2 token
#        counts x SDPA/jattn x default/reduce-overhead), minutes on its own. "host" (host_cost.py on
#        cuda at (1,24,1536,128), (1,24,4608,128), (1,12,4096,256), (1,24,256,64), (1,24,512,128),
#        about two minutes) goes with either: JATTN_GPU_PY_STEPS="test host" or "bench host"
#        JATTN_TEST_TIMEOUT=seconds (default 320), JATTN_BENCH_TIMEOUT=seconds (default 200),
#        JATTN_COMPILE_TIMEOUT=seconds (default 540), JATTN_HOST_TIMEOUT=seconds (default 240)
#        JATTN_BENCH_ARGS="..." extra arguments for bench_attention.py
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build-python-gpu/out}
STEPS=${JATTN_GPU_PY_STEPS:-"test bench"}
mkdir -p "$OUT"
has() { [[ " $STEPS " == *" $1 "* ]]; }
note() { echo "== $*"; }
status=0

note "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
note "install .whl/*.whl into /tmp/site"
ls .whl/*.whl || { echo "no wheels in .whl/: run bench/python/build_wheels.sh and carry .whl"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
  { echo "INSTALL FAILED"; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
python3 -c '
import sys, torch, numpy, diffusers, jattn
print("python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__,
      "diffusers", diffusers.__version__, "jattn", jattn.__version__, "from", jattn.__file__)
for b in jattn.backends():
    print(" ", b.name, "available" if b.available else "unavailable", "-", b.detail)' ||
  { echo "IMPORT FAILED"; exit 1; }

if has test; then
  note "tests (python/tests: the GPU tests and the rest)"
  timeout "${JATTN_TEST_TIMEOUT:-320}" python3 -m pytest -q -s -rs -p no:cacheprovider --durations=12 python/tests > "$OUT/pytest.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -20
  grep -E "FLUX.2 CUDA|FLUX.2 CPU" "$OUT/pytest.txt" | head -4
  echo "pytest rc=$rc: $(tail -1 "$OUT/pytest.txt")"
fi

if has bench; then
  note "bench (bench_attention.py --device cuda)"
  # shellcheck disable=SC2086
  timeout "${JATTN_BENCH_TIMEOUT:-200}" python3 bench/python/bench_attention.py --device cuda --flux-f64 --json "$OUT/bench.jsonl" \
    --skip compile ${JATTN_BENCH_ARGS:-} > "$OUT/bench.md" 2> "$OUT/bench.err"
  rc=$?
  [ $rc -eq 0 ] || { status=1; echo "bench rc=$rc"; tail -20 "$OUT/bench.err"; }
  [ -s "$OUT/bench.err" ] || rm -f "$OUT/bench.err"
fi

if has compile; then
  note "compiled FLUX.2 forward (bench_attention.py --device cuda, the compile section)"
  # shellcheck disable=SC2086
  timeout "${JATTN_COMPILE_TIMEOUT:-540}" python3 bench/python/bench_attention.py --device cuda --json "$OUT/compile.jsonl" \
    --skip attention,upcast,overhead,flux ${JATTN_BENCH_ARGS:-} > "$OUT/compile.md" 2> "$OUT/compile.err"
  rc=$?
  [ $rc -eq 0 ] || { status=1; echo "compile bench rc=$rc"; tail -20 "$OUT/compile.err"; }
  [ -s "$OUT/compile.err" ] || rm -f "$OUT/compile.err"
fi

if has host; then
  note "host cost (host_cost.py --device cuda --profile)"
  timeout "${JATTN_HOST_TIMEOUT:-240}" python3 bench/python/host_cost.py --device cuda --profile --json "$OUT/host.jsonl" \
    > "$OUT/host.md" 2> "$OUT/host.err"
  rc=$?
  [ $rc -eq 0 ] || { status=1; echo "host cost rc=$rc"; tail -20 "$OUT/host.err"; }
  [ -s "$OUT/host.err" ] || rm -f "$OUT/host.err"
fi

if has test; then
  note "test summary"
  grep -E "test_cuda.py" "$OUT/pytest.txt" | grep -E "SKIPPED|FAILED" | head -5
  echo "pytest: $(tail -1 "$OUT/pytest.txt")"
fi
if has bench && [ -s "$OUT/bench.md" ]; then
  note "bench tables (also $OUT/bench.md)"
  sed -n '/^| device/,$p' "$OUT/bench.md"
fi
if has host && [ -s "$OUT/host.md" ]; then
  note "host cost tables (also $OUT/host.md)"
  sed -n '/^| shape/,$p' "$OUT/host.md"
fi
if has compile && [ -s "$OUT/compile.md" ]; then
  note "compiled forward table (also $OUT/compile.md)"
  sed -n '/^| device/,$p' "$OUT/compile.md"
fi
exit $status
