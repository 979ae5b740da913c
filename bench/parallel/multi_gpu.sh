#!/usr/bin/env bash
# The multi-GPU run of issue 15 (sequence-parallel attention over NCCL), on a machine of 2 or
# more GPUs (nvidia-h200-x2, x4, x8), from the repository root, in one call:
#
#   bench/parallel/multi_gpu.sh 2>&1 | tee multi_gpu.log
#
#   1. build     cmake -DJATTN_CUDA=ON in $BUILD (default build-mgpu), with NCCL found beside the
#                CUDA toolkit, else under NCCL_ROOT, else in the nvidia-nccl-cu13 wheel of python3
#                (the steps command and bench need it; on one GPU, STEPS="build test" does not)
#   2. test      test_sp_device (every rank's steps in one process on GPU 0) and test_sp_threads
#   3. command   when mpirun is present: `mpirun -np 2 jattn run --parallel ring|ulysses --backend
#                cuda --check`, the command's own NCCL path (skipped, saying so, without MPI)
#   4. bench     sp_gpu_bench: parity of both algorithms through NCCL on P = 2, 4, 8 GPUs (as many
#                as present) against the float64 reference of the whole problem, then the time
#                per call on P GPUs against 1 at (1,24,16384,128), (1,40,32768,128),
#                (1,40,75600,128), and the table of speedup and efficiency t1 / (P tP); exit 3 if an
#                efficiency at S >= 32768 is below 90%
#
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and PyTorch's, NVSHMEM's) for every program
# started here; nothing here calls cuMulticastCreate.
# env: BUILD, OUT (logs; default $BUILD/out), STEPS (default "build test command bench"),
#      GPUS (e.g. "2,4"; default every power of two present), REPS (default 5), SHAPES
#      (B,H,S,D ...; default the three above), NCCL_ROOT.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${BUILD:-build-mgpu}
OUT=${OUT:-$BUILD/out}
STEPS=${STEPS:-"build test command bench"}
REPS=${REPS:-5}
mkdir -p "$OUT"
has() { [[ " $STEPS " == *" $1 "* ]]; }
note() { echo "== $*"; }
status=0

note "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
nvidia-smi topo -m 2>/dev/null | head -12
echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

if has build; then
    note "build ($BUILD)"
    if [ -z "${NCCL_ROOT:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
        NCCL_ROOT=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
            python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
        [ -n "$NCCL_ROOT" ] && echo "NCCL from the Python wheel: $NCCL_ROOT"
    fi
    { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON ${NCCL_ROOT:+-DNCCL_ROOT="$NCCL_ROOT"} &&
        cmake --build "$BUILD" -j"$(nproc)"; } >"$OUT/build.log" 2>&1 ||
        { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
    grep -E "jattn: (the (MPI|NCCL) transport|cuda backend)" "$OUT/build.log"
fi
# A libnccl from a wheel is found by the loader through LD_LIBRARY_PATH.
NCCL_LIB=$(sed -n 's/^JATTN_NCCL_LIBRARY:FILEPATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
if [ -n "$NCCL_LIB" ]; then
    LD_LIBRARY_PATH="$(dirname "$NCCL_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
fi

if has test; then
    note "test_sp_device, test_sp_threads"
    (cd "$BUILD" && ctest --output-on-failure -R '^test_sp_(device|threads)$') 2>&1 | tee "$OUT/test.log" | tail -12
    grep -q "100% tests passed" "$OUT/test.log" || status=1
fi

if has command; then
    note "the command over NCCL: mpirun -np 2 jattn run --parallel ... --backend cuda --check"
    if [ "$NGPU" -lt 2 ]; then
        echo "SKIP: $NGPU GPU(s); NCCL needs a GPU per rank"
    elif ! grep -q '^JATTN_NCCL_LIBRARY:FILEPATH=/' "$BUILD/CMakeCache.txt" 2>/dev/null; then
        echo "SKIP: NCCL was not found at build time"
    elif command -v mpirun >/dev/null 2>&1; then
        MPIFLAGS=""
        mpirun --version 2>&1 | grep -q "Open MPI" && MPIFLAGS="--allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
        for a in ring ulysses; do
            # shellcheck disable=SC2086
            mpirun -np 2 $MPIFLAGS "$BUILD/tools/jattn" run --parallel $a --backend cuda --check --seq 16384 --heads 24 \
                2>&1 | tee "$OUT/command_$a.log" | grep -E "^(parallel|kernel|time|speed|parity)|jattn:"
            grep -q "PASS" "$OUT/command_$a.log" || status=1
        done
    else
        echo "SKIP: no mpirun on this machine (sp_gpu_bench below covers NCCL without MPI)"
    fi
fi

if has bench && [ ! -x "$BUILD/tests/sp_gpu_bench" ]; then
    note "sp_gpu_bench: not built: NCCL was not found (set NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so*)"
    status=1
elif has bench && [ "$NGPU" -lt 2 ]; then
    note "sp_gpu_bench: SKIP, $NGPU GPU(s) (on one GPU: STEPS=\"build test\" runs test_sp_device)"
elif has bench; then
    note "sp_gpu_bench: parity and time per call, 1 GPU against P"
    # shellcheck disable=SC2086
    "$BUILD/tests/sp_gpu_bench" ${GPUS:+--gpus "$GPUS"} --reps "$REPS" ${SHAPES:-} 2>&1 | tee "$OUT/bench.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" -ne 0 ] && status=$rc
fi
note "done: exit $status (logs in $OUT)"
exit "$status"
