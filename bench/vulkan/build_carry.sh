#!/bin/sh
# Builds vk_bench for the GPU machine (x86-64, no build there): the static library without OpenMP
# or CUDA (fewer run-time dependencies), vk_bench linked against it. Usage: build_carry.sh OUTDIR
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build_carry.sh OUTDIR}
cmake -S "$root" -B "$root/build-carry" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_OPENMP=OFF \
      -DJATTN_BUILD_TESTS=OFF >/dev/null
cmake --build "$root/build-carry" -j2 --target jattn_static >/dev/null
mkdir -p "$out"
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -DJATTN_STATIC_DEFINE -I"$root/include" -I"$root/src" \
   "$root/bench/vulkan/vk_bench.c" "$root/build-carry/libjattn.a" -lm -lpthread -ldl -o "$out/vk_bench"
cp "$root/bench/vulkan/torch_sdpa_peer.py" "$out/"
