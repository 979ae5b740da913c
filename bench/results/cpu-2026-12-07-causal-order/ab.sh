#!/bin/bash
# usage: ab.sh ROUNDS bin1 bin2 ... ; prints median ms per (bin, mask)
R=$1; shift
for r in $(seq $R); do for b in "$@"; do for m in none causal blocks1; do
  case $m in none) a="";; causal) a="--causal";; blocks1) a="--blocks 1";; esac
  ms=$($b run --backend cpu --threads 1 --heads 8 --seq 1536 --dim 128 $a --no-check --reps 5 --json | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['ms'])")
  echo "$(basename $b) $m $ms"
done; done; done > /tmp/ab/out.txt
python3 - <<'P'
import collections,statistics
d=collections.defaultdict(list)
for l in open('/tmp/ab/out.txt'):
    b,m,ms=l.split(); d[(b,m)].append(float(ms))
bins=sorted({b for b,_ in d})
for b in bins:
    n=statistics.median(d[(b,'none')]); c=statistics.median(d[(b,'causal')]); g=statistics.median(d[(b,'blocks1')])
    print(f"{b:12s} none {n:7.2f} causal {c:7.2f} blocks1 {g:7.2f}  causal/none {c/n:.3f}  blocks1/none {g/n:.3f}")
P
