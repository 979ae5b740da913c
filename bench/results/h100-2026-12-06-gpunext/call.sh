#!/usr/bin/env bash
# one device call (gpunext): the battery, then perf flux+masks, then the D=1 chain loop, within ~580 s
set -u
export COMMIT=gpunext-5df6795
B=$PWD/build-gpu
SECONDS=0
OUT=$OUT BUILD=$B CAP_BUILD=170 CAP_LOAD=220 bash bench/gpu/battery.sh > /tmp/battery.out 2>&1
echo "battery done after $SECONDS s"; tail -45 /tmp/battery.out
mkdir -p /tmp/perf
left=$((505 - SECONDS)); [ $left -gt 60 ] && OUT=/tmp/perf BUILD=$B STEPS="build flux masks" timeout $left bash bench/gpu/perf.sh > /tmp/perf/perf.txt 2>&1
echo "perf done after $SECONDS s"
echo "== D=1 chain loop (v3)"; f=0; n=0
while [ $SECONDS -lt 560 ] && [ $n -lt 40 ]; do n=$((n+1)); JATTN_CUDA_BWD_KERNEL=v3 timeout 15 $B/tests/test_backward cuda chain > /tmp/perf/d1-$n.log 2>&1 || { f=$((f+1)); tail -4 /tmp/perf/d1-$n.log; }; done; echo "d1 failures: $f/$n"
cp /tmp/battery.out /tmp/perf/; tar czf $OUT/perf.tgz -C /tmp perf; cp /tmp/perf/perf.md $OUT/ 2>/dev/null
tail -12 /tmp/perf/perf.txt; cat /tmp/perf/perf.md
