#!/usr/bin/env bash
# Fills /work/main/.carry-cudabwd (or CARRY) with what bench/gpu/backward_run.sh runs on the GPU
# machine: bin/ (test_backward, jattn; stripped), lib/ (libcudart, libgomp), the scripts, and for
# bench/gpu/backward_python_run.sh whl/ (beside carry.tgz) and py/ (when .whl/ has the wheels); packed.
set -eu -o pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-/work/main/.carry-cudabwd}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cmake --build build -j2 --target test_backward jattn >/dev/null
rm -rf "$CARRY" && mkdir -p "$CARRY/stage/bin" "$CARRY/stage/lib"
cp build/tests/test_backward build/tools/jattn "$CARRY/stage/bin/"
strip "$CARRY"/stage/bin/*
cp -L "$(ldconfig -p | awk '/libcudart.so.13 /{print $NF; exit}' || true)" "$CARRY/stage/lib/" 2>/dev/null ||
  cp -L "$CUDA_HOME"/lib64/libcudart.so.13 "$CARRY/stage/lib/"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$CARRY/stage/lib/"
cp bench/gpu/backward_run.sh bench/gpu/backward_v2_run.sh bench/gpu/backward_v2_tail.sh bench/gpu/backward_python_run.sh bench/gpu/torch_sdpa_backward.py "$CARRY/stage/"
# the Python side (bench/gpu/backward_python_run.sh): the wheels of bench/python/build_wheels.sh, when built
if ls .whl/jattn-*.whl >/dev/null 2>&1; then
  mkdir -p "$CARRY/whl" "$CARRY/stage/py"
  cp .whl/jattn-*.whl .whl/diffusers-*.whl "$CARRY/whl/"  # beside carry.tgz, as they are (compressed already)
  cp -r python/tests "$CARRY/stage/py/tests"
  cp bench/python/flux2_train_step.py "$CARRY/stage/py/"
fi
tar czf "$CARRY/carry.tgz" -C "$CARRY/stage" .
rm -rf "$CARRY/stage"
du -sh "$CARRY"
