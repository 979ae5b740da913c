#!/usr/bin/env bash
# one tight call: the D=1 chain's cause (main's binaries, carried) while the working tree (the forward at head dims
# <= 4 on v1) builds; then the suites that draw tiny head dims on the working tree, alone side by side, and the
# chain loop with the backward v3 forced
set -u
SECONDS=0
ROOT=$PWD; B=$ROOT/build-gpu; C=$ROOT/.carry/d90; L=/tmp/perf
mkdir -p $L
( cmake -S $ROOT -B $B -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF -DJATTN_NCCL=OFF \
    -DJATTN_VULKAN=OFF > $L/cfg.log 2>&1 &&
  cmake --build $B -j 15 --target jattn test_cuda_device test_parity test_edges test_masks test_backward test_sweep \
    > $L/build.log 2>&1; echo "build rc $? at $SECONDS s" > $L/build.rc ) &
BPID=$!
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== A: the forward's out and lse alone over the float32 floor, (1,1,100,77,D), 60 draws each (main's binaries)"
for kern in auto 1; do echo "-- forward $kern"
  for d in 1 2 3 4 8 16; do LD_LIBRARY_PATH=$C env $([ $kern != auto ] && echo JATTN_CUDA_KERNEL=$kern) $C/d1_chain_floor 60 cuda $d | tail -2; done
done
echo "A done after $SECONDS s"
echo "== B: test_backward cuda chain (main's), backward v3 forced, forward AUTO vs v1"
for kern in auto 1; do f=0; n=0; t0=$SECONDS
  while [ $n -lt 8 ] && [ $((SECONDS - t0)) -lt 40 ]; do n=$((n+1))
    env JATTN_CUDA_BWD_KERNEL=v3 $([ $kern != auto ] && echo JATTN_CUDA_KERNEL=$kern) timeout 20 $C/test_backward cuda chain > $L/ch-$kern-$n.log 2>&1 || { f=$((f+1)); grep FAIL $L/ch-$kern-$n.log | cut -c1-300 | head -2; }
  done; echo "forward $kern: chain failures $f/$n ($((SECONDS - t0)) s)"
done
echo "== E: forward ms at (1,24,4608,D), AUTO (main: v7) vs v1"
for d in 1 2 4 8 16; do
  a=$(timeout 30 $C/jattn run --backend cuda --no-check --json --heads 24 --seq 4608 --dim $d 2>/dev/null | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r.get("ms"), r.get("kernel"))' 2>/dev/null)
  b=$(JATTN_CUDA_KERNEL=1 timeout 30 $C/jattn run --backend cuda --no-check --json --heads 24 --seq 4608 --dim $d 2>/dev/null | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r.get("ms"), r.get("kernel"))' 2>/dev/null)
  echo "D=$d auto $a | v1 $b"
done
echo "E done after $SECONDS s"
wait $BPID; cat $L/build.rc; grep -E " error" $L/build.log | head
T=$B/tests
echo "== the working tree's suites, side by side"
pids=""
for s in "test_cuda_device" "test_parity cuda" "test_edges cuda" "test_masks cuda" "test_sweep cuda 600 3e7" "test_backward cuda all"; do
  n=$(echo $s | tr ' ' '_'); ( timeout 200 $T/$s > $L/s-$n.log 2>&1; echo "$? $s" > $L/s-$n.rc ) & pids="$pids $!"
done
f=0; n=0; t0=$SECONDS
while [ $n -lt 20 ] && [ $((SECONDS - t0)) -lt 100 ]; do n=$((n+1))
  JATTN_CUDA_BWD_KERNEL=v3 timeout 20 $T/test_backward cuda chain > $L/d1-$n.log 2>&1 || { f=$((f+1)); grep FAIL $L/d1-$n.log | cut -c1-300 | head -2; }
done; echo "working tree, backward v3 forced: chain failures $f/$n"
wait $pids
for r in $L/s-*.rc; do n=$(basename $r .rc); echo "rc $(cat $r) | $(tail -1 $L/$n.log | cut -c1-150)"; grep -h "^FAIL" $L/$n.log | cut -c1-250 | head -3; done
tar czf $OUT/call.tgz -C /tmp perf
echo "all done after $SECONDS s"
