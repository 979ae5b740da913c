#!/usr/bin/env bash
# The Python side of the cuda backward on the GPU machine (issue 22), from the carried folder that
# lab/gpu/backward_carry.sh fills (../whl/: the jattn and diffusers wheels of
# bench/python/build_wheels.sh, beside carry.tgz; py/: python/tests and bench/python/flux2_train_step.py):
#   install the wheels into /tmp/site -> pytest python/tests/test_autograd.py (the CUDA gradient
#   tests and the FLUX.2 LoRA step on CUDA run there) [180] -> flux2_train_step.py (FLUX.2, 24 heads
#   of 128, 2+2 blocks, f32, 1024+512 and 4096+512 tokens, eager and torch.compile, SDPA against
#   jattn.diffusers.enabled(), gradients against the float64 step) [300] -> its table last.
# usage (device tool, carry [".carry-cudabwd"]):
#   cd .carry-cudabwd && mkdir -p x && tar xzf carry.tgz -C x && cd x && OUT=$OUT bash backward_python_run.sh
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl ||
  { echo "INSTALL FAILED"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/py/tests PYTHONUNBUFFERED=1
python3 -c 'import torch, jattn; print("torch", torch.__version__, "jattn", jattn.__version__, jattn.backends())'
timeout "${JATTN_TEST_TIMEOUT:-180}" python3 -m pytest -q -s -rs -p no:cacheprovider py/tests/test_autograd.py \
  > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?: $(tail -1 "$OUT/pytest.txt")"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -20
timeout "${JATTN_TRAIN_TIMEOUT:-300}" python3 py/flux2_train_step.py --json "$OUT/train.jsonl" > "$OUT/train.md" 2> "$OUT/train.err"
echo "train rc=$?"
tail -12 "$OUT/train.md"
