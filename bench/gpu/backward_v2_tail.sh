#!/usr/bin/env bash
# The accuracy margins of the backward v2's variants (not yet run): test_backward cuda's gate and chain
# parts, SEEDS fresh seeds per variant, every case printed (JATTN_TEST_VERBOSE); for the cases v2 runs
# (D 64 and 128, seq_kv >= 2) the largest rel_l2 of dq, dk, dv per input distribution, as a fraction of
# the gate (5e-6), per variant. What decides whether a cheaper variant may become the default
# (src/cuda/NOTES.md, "The backward"). From the carried folder of bench/gpu/backward_carry.sh:
#   OUT=$OUT SEEDS=40 bash backward_v2_tail.sh        (about 3 s per seed and variant on the H200)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export JATTN_CUDA_BWD_KERNEL=v2 JATTN_TEST_VERBOSE=1
VARIANTS=${VARIANTS:-"c11:JATTN_CUDA_BWD2_CHAINS=11 c10:JATTN_CUDA_BWD2_CHAINS=10 c20:JATTN_CUDA_BWD2_CHAINS=20
c20fe:JATTN_CUDA_BWD2_CHAINS=20,JATTN_CUDA_BWD2_FAST_EXP=1"}
for v in $VARIANTS; do
  name=${v%%:*}
  : > "$OUT/tail_$name.log"
  for seed in $(seq 1 "${SEEDS:-20}"); do
    for part in gate chain; do
      env $(echo "${v#*:}" | tr , ' ') JATTN_TEST_SEED=$seed timeout 30 ./bin/test_backward cuda $part \
        >> "$OUT/tail_$name.log" 2>&1
    done
  done
done
python3 - "$OUT" $VARIANTS > "$OUT/tail.txt" 2>&1 <<'PY'
import re, sys
out, variants = sys.argv[1], [v.split(":")[0] for v in sys.argv[2:]]
gate = 5e-6
print("largest rel_l2 / gate over the cases v2 runs (D 64, 128; Skv >= 2), per distribution and gradient")
for name in variants:
    worst, cases, fails = {}, 0, 0
    for line in open(f"{out}/tail_{name}.log"):
        if not (line.startswith("ok") or line.startswith("FAIL B=")):
            continue
        m = re.search(r"Skv=(\d+) D=(\d+) .*?dist=(\w+)", line)
        if not m or int(m[2]) not in (64, 128) or int(m[1]) < 2 or "tf32" in line:
            continue
        cases += 1
        fails += line.startswith("FAIL")
        for g, r in re.findall(r"(d[qkv]) rel_l2 ([\d.e+-]+)", line):
            key = (m[3], g)
            worst[key] = max(worst.get(key, 0.0), float(r) / gate)
    print(f"{name}: {cases} cases, {fails} failed")
    for dist in ("uniform", "normal", "peaky", "large"):
        print(f"  {dist:8s} " + "  ".join(f"{g} {worst.get((dist, g), float('nan')):.3f}" for g in ("dq", "dk", "dv")))
PY
cat "$OUT/tail.txt"
