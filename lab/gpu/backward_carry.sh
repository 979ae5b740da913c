#!/usr/bin/env bash
# Fills /work/main/.carry-cudabwd (or CARRY) with what lab/gpu/backward_run.sh, backward_v2_run.sh
# and backward_v2_tail.sh run on the GPU machine: bin/ (test_backward, jattn; stripped), lib/
# (libcudart, libgomp, and libjattn.so for the Python package of the source tree, py/src), the
# scripts, py/tests; for lab/gpu/backward_python_run.sh whl/ (beside carry.tgz) when .whl/ has the
# wheels; lib_base/libjattn.so when BASE_LIB names a libjattn.so of another commit (backward_v2_tail.sh
# runs the Python accuracy test and issue 30's table on it too). Packed.
#   BUILD=build CARRY=/work/main/.carry-cudabwd [BASE_LIB=/path/to/libjattn.so] lab/gpu/backward_carry.sh
set -eu -o pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-/work/main/.carry-cudabwd}
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cmake --build "$BUILD" -j2 --target test_backward jattn jattn_shared >/dev/null
rm -rf "$CARRY" && mkdir -p "$CARRY/stage/bin" "$CARRY/stage/lib" "$CARRY/stage/py"
cp "$BUILD"/tests/test_backward "$BUILD"/tools/jattn "$CARRY/stage/bin/"
strip "$CARRY"/stage/bin/*
cp -L "$BUILD"/libjattn.so "$CARRY/stage/lib/libjattn.so"
strip --strip-unneeded "$CARRY/stage/lib/libjattn.so"
if [ -n "${BASE_LIB:-}" ]; then
  mkdir -p "$CARRY/stage/lib_base"
  cp -L "$BASE_LIB" "$CARRY/stage/lib_base/libjattn.so"
  strip --strip-unneeded "$CARRY/stage/lib_base/libjattn.so"
fi
cp -L "$(ldconfig -p | awk '/libcudart.so.13 /{print $NF; exit}' || true)" "$CARRY/stage/lib/" 2>/dev/null ||
  cp -L "$CUDA_HOME"/lib64/libcudart.so.13 "$CARRY/stage/lib/"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$CARRY/stage/lib/"
cp lab/gpu/backward_run.sh lab/gpu/backward_v2_run.sh lab/gpu/backward_v2_tail.sh lab/gpu/backward_python_run.sh \
  bench/gpu/torch_sdpa_backward.py bench/gpu/backward_precision_peer.py "$CARRY/stage/"
mkdir -p "$CARRY/stage/py/src"
cp -r python/src/jattn "$CARRY/stage/py/src/"
rm -rf "$CARRY/stage/py/src/jattn/_lib" "$CARRY"/stage/py/src/jattn/__pycache__
cp -r python/tests "$CARRY/stage/py/tests"
rm -rf "$CARRY"/stage/py/tests/__pycache__
# the Python side (lab/gpu/backward_python_run.sh): the wheels of bench/python/build_wheels.sh, when built
if ls .whl/jattn-*.whl >/dev/null 2>&1; then
  mkdir -p "$CARRY/whl"
  cp .whl/jattn-*.whl .whl/diffusers-*.whl "$CARRY/whl/" # beside carry.tgz, as they are (compressed already)
  cp bench/python/flux2_train_step.py "$CARRY/stage/py/"
fi
tar czf "$CARRY/carry.tgz" -C "$CARRY/stage" .
rm -rf "$CARRY/stage"
du -sh "$CARRY"
