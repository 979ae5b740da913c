#!/usr/bin/env bash
# Key padding beside the unpadded call of the same shape, in one run (issue 12's targets):
#   unpadded                       every key attended
#   kv_len = Skv/2                 --kv-len: the last half never loaded
#   mask, last half zero           --key-mask [Skv]: the same keys through a mask
#   mask, one key masked           --key-mask with a single zero (key Skv/3)
#   mask, random half              --key-mask with each key kept with probability 1/2 (no target:
#                                  every key block is gapped, the worst case for the tiles)
# Each variant is timed ROUNDS times, the variants interleaved round by round (so that drift of
# the machine's clock hits them alike); each time is `jattn run --json`'s median over its own
# repeats (device events on cuda, the host clock on cpu). Prints, per variant, the median over
# rounds, the spread (min..max) and the ratio to the unpadded median; targets: kv_len and
# last-half mask <= 0.55x, one masked key <= 1.03x.
# usage: bench/padding/run.sh [BACKEND] [SEQ] [ROUNDS] [JATTN] [THREADS]
#        defaults: cuda 4608 5 build/tools/jattn 0 (all cores); heads 24, head_dim 128, batch 1.
set -eu -o pipefail
BACKEND=${1:-cuda}
SEQ=${2:-4608}
ROUNDS=${3:-5}
J=${4:-build/tools/jattn}
THREADS=${5:-0}
T=$(mktemp -d "${TMPDIR:-/tmp}/padding_bench.XXXXXX")
trap 'rm -rf "$T"' EXIT

python3 - "$T" "$SEQ" <<'EOF'
# The masks as bool .npy [Skv], written without numpy.
import random, struct, sys
out, S = sys.argv[1], int(sys.argv[2])
def write(name, bits):
    head = "{'descr': '|b1', 'fortran_order': False, 'shape': (%d,), }" % S
    head += " " * (118 - len(head)) + "\n"
    with open("%s/%s.npy" % (out, name), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + bytes(bits))
write("last_half", [1 if j < S // 2 else 0 for j in range(S)])
write("one_key", [0 if j == S // 3 else 1 for j in range(S)])
rng = random.Random(1)
write("random_half", [rng.randint(0, 1) for _ in range(S)])
EOF

names=(unpadded kv_len_half mask_last_half mask_one_key mask_random_half)
args=("" "--kv-len $((SEQ / 2))" "--key-mask $T/last_half.npy" "--key-mask $T/one_key.npy" "--key-mask $T/random_half.npy")
reps=$([ "$BACKEND" = cuda ] && echo 30 || echo 3)
echo "$($J --version | head -1), backend $BACKEND, (1,24,$SEQ,128), $ROUNDS rounds of $reps repeats, threads $THREADS"
for r in $(seq "$ROUNDS"); do
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086
    ms=$($J run --backend "$BACKEND" --threads "$THREADS" --seq "$SEQ" --no-check --json --reps "$reps" ${args[$i]} |
         python3 -c 'import json, sys; print(json.load(sys.stdin)["ms"])')
    echo "${names[$i]} $ms" >> "$T/times"
  done
done
python3 - "$T/times" <<'EOF'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, ms = line.split()
    times.setdefault(name, []).append(float(ms))
base = statistics.median(times["unpadded"])
target = {"kv_len_half": 0.55, "mask_last_half": 0.55, "mask_one_key": 1.03}
print("| variant | ms (median of rounds) | spread | vs unpadded | target |")
print("| --- | ---: | --- | ---: | --- |")
for name, ts in times.items():
    med = statistics.median(ts)
    t = target.get(name)
    verdict = "" if t is None else ("<= %.2fx: %s" % (t, "met" if med / base <= t else "MISSED"))
    print("| %s | %.3f | %.3f..%.3f | %.3fx | %s |" % (name, med, min(ts), max(ts), med / base, verdict))
EOF
