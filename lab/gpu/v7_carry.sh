#!/usr/bin/env bash
# Builds, on the development machine, what lab/gpu/v7_run.sh runs on the GPU machine, and packs it
# into .carry-pack/carry.tgz (git-ignored; name .carry-pack in the device call's carry):
#   build/tests/   test_backward test_parity test_padding test_edges test_cuda_device
#   build/tools/   jattn, and jattn_w4 / jattn_w6 / jattn_w8: jattn with kernel v7's warps per CTA
#                  forced (the v7 object compiled with -DJATTN_V7_FORCE_WARPS=N, for the A/B of the
#                  model in v7_warps)
#   build/libjattn.so, lib/ (libcudart.so.13, libgomp.so.1)
# The CUDA targets are JATTN_CUDA_ARCHS=90a (the H200 runs the sm_90a build of the portable kernels).
# usage: lab/gpu/v7_carry.sh            (B=/tmp/v7carry by default; JOBS=2)
set -eu -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=${B:-/tmp/v7carry}
JOBS=${JOBS:-2}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_VULKAN=OFF \
  -DJATTN_MPI=OFF -DJATTN_NCCL=OFF > /dev/null
cmake --build "$B" -j "$JOBS" --target jattn jattn_shared test_backward test_parity test_padding test_edges \
  test_cuda_device > /dev/null
P=$(mktemp -d)
mkdir -p "$P/build/tests" "$P/build/tools" "$P/lib"
for t in test_backward test_parity test_padding test_edges test_cuda_device; do cp "$B/tests/$t" "$P/build/tests/"; done
cp "$B/tools/jattn" "$P/build/tools/"
cp -L "$B/libjattn.so" "$P/build/libjattn.so"
# the warps variants: the library with the v7 object recompiled, the command relinked
obj=CMakeFiles/jattn_objects.dir/src/cuda/attention_v7_mma_f16x2.cu.o
for w in 4 6 8; do
  V=$(mktemp -d)
  (cd "$B" && /usr/local/cuda/bin/nvcc -DJATTN_BUILDING -D_POSIX_C_SOURCE=200809L -DJATTN_V7_FORCE_WARPS=$w \
    --options-file CMakeFiles/jattn_objects.dir/includes_CUDA.rsp -O3 -DNDEBUG -Xcompiler=-fPIC \
    -Xcompiler=-fvisibility=hidden -std=c++17 -gencode=arch=compute_90a,code=sm_90a -x cu \
    -c "$ROOT/src/cuda/attention_v7_mma_f16x2.cu" -o "$V/attention_v7_mma_f16x2.cu.o")
  cp "$B/libjattn.a" "$V/libjattn.a"
  ar r "$V/libjattn.a" "$V/attention_v7_mma_f16x2.cu.o" 2> /dev/null
  ar t "$V/libjattn.a" | grep -q attention_v7_mma_f16x2.cu.o
  (cd "$B/tools" && g++ $(sed 's#CMakeFiles#'"$B"'/tools/CMakeFiles#g' CMakeFiles/jattn.dir/objects1) -o "$P/build/tools/jattn_w$w" \
    "$B/kit/libjattn_kit.a" "$V/libjattn.a" -lm -ldl "$(gcc -print-file-name=libgomp.so)" /usr/local/cuda/lib64/libcudart.so \
    -lrt -lpthread -L/usr/local/cuda/targets/x86_64-linux/lib)
  rm -rf "$V"
done
strip "$P"/build/tests/* "$P"/build/tools/*
cp -L /usr/local/cuda/lib64/libcudart.so.13 "$P/lib/"
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$P/lib/"
mkdir -p .carry-pack
tar czf .carry-pack/carry.tgz -C "$P" .
rm -rf "$P"
ls -la .carry-pack/carry.tgz
