#!/usr/bin/env bash
# the peaky64 Python precision draws' rate on the backward v4, and where the host time of a small autograd step goes
set -u
SECONDS=0
ROOT=$PWD; C=$ROOT/.carry/d90; L=/tmp/perf; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PKG=$(mktemp -d); cp -r python/src/jattn $PKG/jattn && mkdir -p $PKG/jattn/_lib && cp $C/libjattn.so.0.4 $PKG/jattn/_lib/libjattn.so
cc -Iinclude tests/abi/jattn_abi_probe.c -o $PKG/abi_probe && $PKG/abi_probe > $PKG/jattn/_lib/abi_probe.txt
echo "== C: test_backward_precision.py on cuda, peaky16 and peaky64, fresh seeds"
n=0; f=0
while [ $n -lt 10 ] && [ $SECONDS -lt 150 ]; do n=$((n+1))
  PYTHONPATH=$PKG:$ROOT/python/tests JATTN_TEST_SEED=$RANDOM$RANDOM$RANDOM timeout 40 python3 -m pytest -q -p no:cacheprovider python/tests/test_backward_precision.py -k "peaky and cuda" > $L/pp-$n.log 2>&1 || { f=$((f+1)); grep -E "JATTN_TEST_SEED|less exact|outside the gate" $L/pp-$n.log | cut -c1-700 | head -4; }
done; echo "peaky cuda: $f/$n runs failed"; tail -1 $L/pp-1.log
echo "== D: autograd profile (1,24,256,64)"
PYTHONPATH=$PKG timeout 100 python3 lab/gpu/autograd_profile.py 1,24,256,64 > $L/profile.txt 2>&1
grep -v "^-" $L/profile.txt | cut -c1-170 | head -80
tar czf $OUT/call.tgz -C /tmp perf
echo "all done after $SECONDS s"
