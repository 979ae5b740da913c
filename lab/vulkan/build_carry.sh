#!/bin/sh
# Builds vk_bench for the GPU machine (x86-64, no build there): the static library without OpenMP
# or CUDA (fewer run-time dependencies), vk_bench linked against it, and the vk test programs
# (test_vulkan, test_edges, test_parity, test_padding) of the same build, stripped, for
# h200_run.sh. Usage: build_carry.sh OUTDIR
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build_carry.sh OUTDIR}
cmake -S "$root" -B "$root/build-carry" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_OPENMP=OFF \
      -DJATTN_BUILD_TESTS=ON >/dev/null
cmake --build "$root/build-carry" -j2 --target jattn_static test_vulkan test_edges test_parity test_padding >/dev/null
mkdir -p "$out"
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -DJATTN_STATIC_DEFINE -I"$root/include" -I"$root/src" \
   "$root/bench/vulkan/vk_bench.c" "$root/build-carry/libjattn.a" -lm -lpthread -ldl -o "$out/vk_bench"
for t in test_vulkan test_edges test_parity test_padding; do
    cp "$root/build-carry/tests/$t" "$out/" && strip "$out/$t"
done
strip "$out/vk_bench"
cp "$root/bench/vulkan/torch_sdpa_peer.py" "$root/lab/vulkan/h200_run.sh" "$root/lab/vulkan/vk_summary.py" "$out/"
