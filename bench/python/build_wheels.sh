#!/usr/bin/env bash
# The wheels bench/python/gpu_run.sh installs on the GPU machine, into .whl/ (git-ignored; carry
# it): jattn (py3-none-linux_x86_64, one wheel for every CPython 3: libjattn inside, with the
# cuda backend and the CUDA runtime linked statically) and diffusers (pure Python, the version
# python/requirements-test.txt pins). The GPU machine has torch, numpy, huggingface_hub,
# safetensors, regex, requests and Pillow already (diffusers' other needs).
# usage: bench/python/build_wheels.sh      (uses .venv from `make test-python` when it exists)
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
mkdir -p .whl
rm -f .whl/jattn-*.whl .whl/diffusers-*.whl  # one version of each: two stop the whole install
command -v nvcc >/dev/null || { echo "nvcc not found: the wheel would have no cuda backend" >&2; exit 1; }
if [ -x "$VENV/bin/python" ]; then
  CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$VENV/bin/python" -m pip wheel -q --no-build-isolation --no-deps \
    --config-settings=build-dir="$PWD/build-python" -w .whl ./python
else
  CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} python3 -m pip wheel -q --no-deps -w .whl ./python
fi
diffusers=$(grep -E '^diffusers==' python/requirements-test.txt)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py -d .whl "$diffusers"
# the wheel's library has the cuda backend built in (here it reports no device, not "not built")
check=$(mktemp -d)
python3 -m pip install -q --no-deps --no-compile --target "$check" .whl/jattn-*.whl
PYTHONPATH="$check" python3 -c '
import jattn
cuda = {b.name: b for b in jattn.backends()}["cuda"]
assert "not built" not in cuda.detail, cuda.detail
print("jattn", jattn.__version__, "wheel: cuda backend built in;", "here:", cuda.detail)'
rm -rf "$check"
ls -l .whl
