#!/usr/bin/env bash
# The FLUX.2 training step (bench/python/flux2_train_step.py, eager) on a GPU machine that has torch but not
# diffusers, from the repository root, with .carry/wheels carried (diffusers 0.42.1 and its dependencies for
# Python 3.12 but numpy, made here by `pip download diffusers==0.42.1 --python-version 3.12 --only-binary=:all:
# --platform manylinux2014_x86_64 ... -d .carry/wheels`):
#   bash lab/gpu/train_step_run.sh            (OUT: where train.md / train.jsonl go; default /tmp/train)
# Builds the shared library (sm_90a) into build-pending/ unless there, makes the package from it, installs the
# wheels into /tmp/site (appended to sys.path: the machine's own packages come first), runs the step.
set -u
OUT=${OUT:-/tmp/train}
B=build-pending
mkdir -p "$OUT"
SECONDS=0
if ! ls $B/libjattn.so.0.*.* > /dev/null 2>&1; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF \
    -DJATTN_VULKAN=OFF > "$OUT/build.txt" 2>&1 && cmake --build $B -j "$(nproc)" --target jattn_shared >> "$OUT/build.txt" 2>&1 ||
    { tail -20 "$OUT/build.txt"; exit 1; }
  echo "build done after $SECONDS s"
fi
PKG=/tmp/pk
# shellcheck source=lab/gpu/package_from_build.sh
. lab/gpu/package_from_build.sh
package_from_build $B $PKG || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/wheels/*.whl 2>&1 | tail -2
PYTHONPATH=$PKG timeout -k 5 "${CAP_TRAIN:-300}" python3 - "$OUT" ${TRAIN_ARGS:-} << 'PY' 2>&1 | tail -30
import runpy, sys
out = sys.argv[1]
sys.path.append("/tmp/site")
sys.argv = ["bench/python/flux2_train_step.py", "--modes", "eager", "--reps", "3", "--json", out + "/train.jsonl", *sys.argv[2:]]
runpy.run_path("bench/python/flux2_train_step.py", run_name="__main__")
PY
echo "train done after $SECONDS s"
