#!/usr/bin/env bash
# stop 45: v1's exact small-head_dim path (AUTO below head_dim 8): the chain floor, the chain runs, the time
# against SDPA, then the whole battery on this tree
set -u
SECONDS=0
ROOT=$PWD; tar xJf .carry/pk.txz -C /tmp; C=/tmp/pk; L=$OUT/log; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== A: the forward's share of the chain floor (100 draws at (1,1,100,77,D))"
for d in 1 4 7; do LD_LIBRARY_PATH=$C $C/d1_chain_floor 100 cuda $d > $L/floor-auto-$d.txt; tail -4 $L/floor-auto-$d.txt | head -2; done
LD_LIBRARY_PATH=$C JATTN_CUDA_KERNEL=7 $C/d1_chain_floor 100 cuda 1 > $L/floor-v7-1.txt; tail -4 $L/floor-v7-1.txt | head -2
echo "== B: test_backward cuda chain, 6 runs (after $SECONDS s)"
f=0; for i in $(seq 6); do timeout 60 $C/test_backward cuda chain > $L/chain-$i.txt 2>&1 || { f=$((f+1)); grep -E "^FAIL|seed" $L/chain-$i.txt | head -3; }; done; echo "chain: $f/6 runs failed"; tail -1 $L/chain-1.txt
echo "== D: time against SDPA (after $SECONDS s)"
PKG=$(mktemp -d); cp -r python/src/jattn $PKG/jattn && mkdir -p $PKG/jattn/_lib && cp $C/libjattn.so.0.4 $PKG/jattn/_lib/libjattn.so
cc -Iinclude tests/abi/jattn_abi_probe.c -o $PKG/abi_probe && $PKG/abi_probe > $PKG/jattn/_lib/abi_probe.txt
PYTHONPATH=$PKG timeout 60 python3 lab/gpu/small_head_dim_time.py --dims 1,2,4,7,8 --reps 9 | tee $L/time-auto.txt
PYTHONPATH=$PKG JATTN_CUDA_KERNEL=7 timeout 40 python3 lab/gpu/small_head_dim_time.py --dims 1,4,7 --reps 9 | tee $L/time-v7.txt
echo "== E: the battery (after $SECONDS s)"
if [ $SECONDS -lt ${BATTERY_BY:-150} ]; then
  OUT=$OUT/battery BUILD=/tmp/jb CAP_BUILD=200 CAP_LOAD=250 timeout 540 bash bench/gpu/battery.sh > $OUT/battery.out 2>&1; tail -25 $OUT/battery.out
fi
echo "all done after $SECONDS s"
