#!/bin/sh
# Builds vk_bench for the GPU machine (x86-64, no build there): the static library without OpenMP
# or CUDA (fewer run-time dependencies), vk_bench (the bench target: through the internal door) and
# the vk test programs (test_vulkan, test_edges, test_parity, test_padding, test_masks) of the same
# build, stripped, for h200_run.sh. With BASELINE=<git revision> (one with the internal door,
# src/internal/), also vk_bench_base: this tree's bench/vulkan/vk_bench.c linked against that
# revision's library (h200_run.sh runs its unmasked lines beside this build's: their out_hash
# compares the two builds bit for bit). Usage: [BASELINE=rev] build_carry.sh OUTDIR
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build_carry.sh OUTDIR}
cmake -S "$root" -B "$root/build-carry" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_OPENMP=OFF \
      -DJATTN_BUILD_TESTS=ON -DJATTN_BUILD_BENCH=ON >/dev/null
cmake --build "$root/build-carry" -j2 --target jattn_static vk_bench test_vulkan test_edges test_parity test_padding \
      test_masks >/dev/null
mkdir -p "$out"
for t in tests/test_vulkan tests/test_edges tests/test_parity tests/test_padding tests/test_masks bench/vk_bench; do
    cp "$root/build-carry/$t" "$out/" && strip "$out/${t#*/}"
done
if [ -n "${BASELINE:-}" ]; then
    base="$root/build-carry-base"
    rm -rf "$base" && mkdir -p "$base/src"
    git -C "$root" archive "$BASELINE" | tar -x -C "$base/src"
    cmake -S "$base/src" -B "$base/build" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_OPENMP=OFF \
          -DJATTN_BUILD_TESTS=OFF >/dev/null
    cmake --build "$base/build" -j2 --target jattn_static >/dev/null
    cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -DJATTN_STATIC_DEFINE -DJATTN_INTERNAL_VK -I"$base/src/include" \
       -I"$base/src/src/internal" "$root/bench/vulkan/vk_bench.c" "$base/build/libjattn.a" -lm -lpthread -ldl \
       -o "$out/vk_bench_base"
    strip "$out/vk_bench_base"
fi
cp "$root/bench/vulkan/torch_sdpa_peer.py" "$root/lab/vulkan/h200_run.sh" "$root/lab/vulkan/vk_summary.py" "$out/"
