#!/usr/bin/env bash
# Where a training step's host time goes on the GPU (issue 36), one device call from the repository root:
#   bash lab/gpu/host_step_run.sh          (OUT: where the logs go; default /tmp/hoststep)
# Builds the shared library (sm_90a) into build-pending/ unless there, makes the package from it, then:
# step_timeline_probe.py (host time inside a step, and each step's kernels; the backward v3 forced too),
# autograd_floor_probe.py, and host_cost.py at the small and FLUX shapes, twice (the spread between runs).
set -u
OUT=${OUT:-/tmp/hoststep}
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
export PYTHONPATH=$PKG
SHAPES=${SHAPES:-1,24,256,64:1,24,1536,128}
run() { echo "\$ $*" >> "$OUT/$LOG"; timeout -k 5 "$CAP" "$@" >> "$OUT/$LOG" 2>&1; echo "rc $?" >> "$OUT/$LOG"; }
LOG=timeline.md CAP=150 run python3 lab/gpu/step_timeline_probe.py --shapes "$SHAPES" --kernels
LOG=timeline-v3.md CAP=60 run env JATTN_CUDA_BWD_KERNEL=3 python3 lab/gpu/step_timeline_probe.py --shapes "$SHAPES" --kernels --steps 100
echo "probes done after $SECONDS s"
LOG=floor.md CAP=90 run python3 lab/gpu/autograd_floor_probe.py --shape 1,24,1536,128
for i in 1 2; do
  LOG=host-$i.md CAP=120 run python3 bench/python/host_cost.py --device cuda --shapes 1x24x256x64,1x24x1536x128
done
echo "all done after $SECONDS s"
cat "$OUT/timeline.md" | grep -v "^\$\|^rc" | head -80
grep "^| (1" "$OUT"/host-*.md
tail -8 "$OUT/floor.md"
