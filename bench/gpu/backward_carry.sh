#!/usr/bin/env bash
# Fills /work/main/.carry-cudabwd (or CARRY) with what bench/gpu/backward_run.sh runs on the GPU
# machine: bin/ (test_backward, jattn; stripped), lib/ (libcudart, libgomp), the scripts; packed.
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
cp bench/gpu/backward_run.sh bench/gpu/torch_sdpa_backward.py "$CARRY/stage/"
tar czf "$CARRY/carry.tgz" -C "$CARRY/stage" .
rm -rf "$CARRY/stage"
du -sh "$CARRY"
