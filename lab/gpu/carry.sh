#!/usr/bin/env bash
# Builds, on the development machine, what bench/gpu/run.sh runs on the GPU machine, into
# .carry/ (git-ignored), so that the GPU machine's time goes to running, not compiling:
#   .carry/build/   tests/ (the ctest executables), tools/jattn, jattn_gpu_bench, sanitize_small,
#                   accuracy_tail (the layout run.sh expects with BUILD=.carry/build); CARRY_TESTS and
#                   CARRY_TOOLS choose which
#   .carry/lib/     libcudart.so.13 and libgomp.so.1 (LD_LIBRARY_PATH=.carry/lib there)
#   .carry/base/    jattn_gpu_bench of REV (an older commit) for run.sh's ab step, and its jattn
#                   command for compare_builds.sh (bitwise A/B), when REV is given
# usage: [PACK=1] lab/gpu/carry.sh [REV]   then, on the GPU machine, from the repository root:
#   LD_LIBRARY_PATH=.carry/lib BUILD=.carry/build OUT=$OUT JATTN_GPU_STEPS="test ..." bash bench/gpu/run.sh
set -eu -o pipefail
cd "$(dirname "$0")/../.."
JOBS=${JOBS:-2}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# base_gpu_bench BUILD_DIR SRC_DIR: jattn_gpu_bench of a REV older than JATTN_BUILD_BENCH, by hand
# as run.sh's build step made it then (for the ab step's base).
base_gpu_bench() {
  local b=$1 src=$2
  local cflags="-std=c11 -D_POSIX_C_SOURCE=200809L -O2 -fopenmp -Wall -Wextra -I$src/include -I$src/src -I$CUDA_HOME/include"
  # shellcheck disable=SC2086
  cc $cflags "$src/bench/gpu/jattn_gpu_bench.c" "$b/libjattn.a" -L"$CUDA_HOME"/lib64 -lcudart -lm -o "$b/jattn_gpu_bench"
}

# Without MPI and NCCL: the GPU machine has neither Debian's libmpi nor a system libnccl (the
# parallel layer's GPU test, test_sp_device, runs its ranks in one process without them).
cmake -S . -B build-carry -DJATTN_CUDA=ON -DJATTN_MPI=OFF -DJATTN_NCCL=OFF -DJATTN_BUILD_BENCH=ON \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-carry -j "$JOBS" >/dev/null
for t in jattn_gpu_bench sanitize_small accuracy_tail; do cp build-carry/bench/$t build-carry/$t; done
rm -rf .carry/build .carry/lib
mkdir -p .carry/build/tests .carry/build/tools .carry/lib
# the GPU tests only: every executable holds the whole library (~5 MB), and a call carries 64 MiB
# (CARRY_TESTS and CARRY_TOOLS narrow them further)
for t in ${CARRY_TESTS:-test_parity test_padding test_cuda_device test_edges test_sp_device test_sp_threads}; do
  [ -f build-carry/tests/$t ] && cp build-carry/tests/$t .carry/build/tests/
done
cp build-carry/tools/jattn .carry/build/tools/
# the sm_90a kernels' objects, for run.sh's sass step (cuobjdump runs there)
mkdir -p .carry/build/obj
find build-carry -name 'attention_v[2-6]*.cu.o' -exec cp {} .carry/build/obj/ \;
for t in ${CARRY_TOOLS:-jattn_gpu_bench sanitize_small accuracy_tail}; do cp build-carry/$t .carry/build/; done
strip .carry/build/tests/* .carry/build/tools/jattn .carry/build/jattn_gpu_bench
cp -L "$CUDA_HOME"/lib64/libcudart.so.13 .carry/lib/
cp -L "$(gcc -print-file-name=libgomp.so.1)" .carry/lib/

if [ -n "${1:-}" ]; then
  rm -rf build-carry-base .carry/base
  mkdir -p build-carry-base/src .carry/base
  git archive "$1" | tar -x -C build-carry-base/src
  cmake -S build-carry-base/src -B build-carry-base -DJATTN_CUDA=ON -DJATTN_BUILD_TESTS=OFF -DJATTN_BUILD_BENCH=ON \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  if [ -f build-carry-base/src/bench/CMakeLists.txt ]; then
    cmake --build build-carry-base -j "$JOBS" --target jattn_gpu_bench >/dev/null
    cp build-carry-base/bench/jattn_gpu_bench build-carry-base/
  else
    cmake --build build-carry-base -j "$JOBS" --target jattn_static >/dev/null
    base_gpu_bench build-carry-base build-carry-base/src
  fi
  cp build-carry-base/jattn_gpu_bench .carry/base/
  cmake --build build-carry-base -j "$JOBS" --target jattn >/dev/null
  cp build-carry-base/tools/jattn .carry/base/
  strip .carry/base/jattn_gpu_bench .carry/base/jattn
  echo "base: $(git rev-parse --short "$1")"
fi
du -sh .carry
# PACK=1: also .carry-pack/carry.tgz (the binaries compress about 3:1; a call carries 64 MiB with
# the working tree); there, `tar xzf .carry-pack/carry.tgz` first
if [ "${PACK:-0}" = 1 ]; then
  rm -rf .carry-pack && mkdir -p .carry-pack
  tar czf .carry-pack/carry.tgz .carry
  du -sh .carry-pack
fi
