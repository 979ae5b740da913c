#!/usr/bin/env bash
# host_cost.py on cuda (the small shapes and the autograd step), main's library
set -u
SECONDS=0
ROOT=$PWD; C=$ROOT/.carry/d90; L=/tmp/perf; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PKG=$(mktemp -d); cp -r python/src/jattn $PKG/jattn && mkdir -p $PKG/jattn/_lib && cp $C/libjattn.so.0.4 $PKG/jattn/_lib/libjattn.so
cc -Iinclude tests/abi/jattn_abi_probe.c -o $PKG/abi_probe && $PKG/abi_probe > $PKG/jattn/_lib/abi_probe.txt
PYTHONPATH=$PKG timeout 200 python3 bench/python/host_cost.py --device cuda --json $L/host.jsonl > $L/host.md 2>&1
echo "rc $? after $SECONDS s"; tail -14 $L/host.md
tar czf $OUT/call.tgz -C /tmp perf
