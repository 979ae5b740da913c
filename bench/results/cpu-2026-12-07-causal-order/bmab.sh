#!/bin/bash
# usage: bmab.sh ROUNDS REPS "label:ENV=..:binary" ...   prints per-label ratios and their median
R=$1; REPS=$2; shift 2
for r in $(seq $R); do for spec in "$@"; do
  IFS=: read lab envs bin <<< "$spec"
  echo "$lab $(env $envs $bin $TH $REPS 8 $S 128 fwd causal | python3 -c "
import json,sys
L=[json.loads(l) for l in sys.stdin]
print('%.2f %.2f %.4f'%(L[0]['cpu_ms'],L[1]['cpu_ms'],L[1]['cpu_ratio']))")"
done; done > /tmp/ab/bmab.txt
python3 - <<'P'
import collections,statistics
d=collections.defaultdict(list)
for l in open('/tmp/ab/bmab.txt'):
    lab,u,c,r=l.split(); d[lab].append(float(r))
for lab,v in d.items(): print(f"{lab:10s} median {statistics.median(v):.4f}  all {' '.join('%.3f'%x for x in v)}")
P
