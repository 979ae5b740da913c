#!/bin/sh
# Peak memory of jattn --backend cpu at (B, H, S, D) = (1, 24, 16384, 128), FLUX layout: the
# process's max RSS (GNU time -v) against inputs + output (4 x 24 x 16384 x 128 floats =
# 768 MiB) + the 64 MiB allowance of issue 3. One timed call after a warm-up, all cores.
# usage (repository root, after bench/cpu/run.sh has built build-bench-cpu): sh bench/cpu/peak_memory.sh [SEQ]
set -u
SEQ=${1:-16384}
BUILD=${BUILD:-build-bench-cpu}
[ -x "$BUILD/bench/bench_cpu" ] || { echo "run bench/cpu/run.sh first (builds $BUILD/bench/bench_cpu)"; exit 1; }
[ -x /usr/bin/time ] || { echo "no /usr/bin/time (apt-get install time)"; exit 77; }
BENCH_PEERS=0 /usr/bin/time -v "$BUILD/bench/bench_cpu" 24 128 1 "$(nproc)" "$SEQ" 2> "$BUILD/peak_memory.log"
rss_kib=$(grep 'Maximum resident set size' "$BUILD/peak_memory.log" | awk '{print $NF}')
data_mib=$(( 4 * 24 * SEQ * 128 * 4 / 1048576 ))
echo "seq $SEQ: max RSS $((rss_kib / 1024)) MiB; inputs + output $data_mib MiB; excess $((rss_kib / 1024 - data_mib)) MiB (allowance 64 MiB)"
