#!/bin/sh
# Why a whole cpu call runs slower than its task alone on the GPU machine's Xeon, and whether the
# forward's next-task prefetch and runs of tasks close it (issue 31): one device call, ~2.5 minutes.
# Measured on 2026-12-04 (bench/results/h200-2026-12-04-v7-call4: "new" 0.98x-1.00x "base") and the two
# switches then removed from src/ with their code; built today, the three builds are the same forward
# (the script stays as the record of that measurement and as call_lab's driver).
#   1. three CPU-only builds of this tree in parallel under /tmp (no git history needed):
#        base  -DCPU_PREFETCH_NEXT_TASK=0 -DCPU_FWD_RUNS=0   (the forward as before 2026-12-04)
#        runs  -DCPU_PREFETCH_NEXT_TASK=0                    (runs of tasks per thread only)
#        new   the defaults (runs of tasks, each asking for its successor's rows)
#   2. bench/cpu/call_lab on "new" (and "base" for the forward): the same work as the task alone
#      with everything hot, as every task of the call walked on one thread by the table directly,
#      with K/V or Q/out of one head for all, through the API with the caller's and the library's
#      workspace; the FMA peak of every thread running at once; the core clock (imul chain)
#   3. bench/cpu/interleaved.py: base, runs, new and PyTorch's CPU SDPA call by call in one process
#   4. bench/cpu/hash_compare.sh: out and lse of base and new bit for bit (avx512, 1 and 2 threads)
# 1 thread on the first core, 2 on the first two (taskset, OMP_PROC_BIND). Prints a short table
# last; every detail in $OUT/xeon_ab.tar.gz (and the table in $OUT/summary.txt).
#
# usage (repository root): sh lab/cpu/xeon_ab.sh
# env: OUT (default /tmp/xeon-ab-out), ROUNDS (default 3), JOBS (default nproc), PYTHON (default
#      python3, the one with torch), SKIP_BUILD=1 (reuse /tmp/xeon-ab/{base,runs,new})
set -u
OUT=${OUT:-/tmp/xeon-ab-out}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
PY=${PYTHON:-python3}
W=/tmp/xeon-ab
D=$W/details
rm -rf "$D" && mkdir -p "$D" "$OUT"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "cpuid family/model: $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')/$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
  echo "logical cpus: $(nproc); load: $(cat /proc/loadavg)"
  echo "transparent hugepages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "python: $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1)"
  lscpu 2>/dev/null | grep -Ei 'cache|numa|socket|thread|core|mhz|hypervisor'
} > "$D/machine.txt" 2>&1
CORES=$(for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do
  cut -d, -f1 "$f" | cut -d- -f1
done 2>/dev/null | sort -un | tr '\n' ' ')
C1=$(echo "$CORES" | awk '{print $1}')
C2=$(echo "$CORES" | awk '{print $1 "," $2}')
PIN1="" PIN2=""
if command -v taskset >/dev/null 2>&1 && [ -n "$C1" ] && [ "$C2" != "$C1," ]; then
  PIN1="taskset -c $C1" PIN2="taskset -c $C2"
fi
echo "1 thread on ${C1:-?}, 2 on ${C2:-?} ${PIN1:+(taskset)}" >> "$D/machine.txt"
cat "$D/machine.txt"

# ---- 1. builds ----------------------------------------------------------------------------
stamp "building base, runs, new"
J=$(((JOBS + 2) / 3))
build() { # name cflags targets...
  name=$1 flags=$2
  shift 2
  (cmake -S . -B "$W/$name" -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=OFF -DJATTN_BUILD_TESTS=OFF \
    -DJATTN_BUILD_BENCH=ON "-DCMAKE_C_FLAGS=$flags" && cmake --build "$W/$name" -j "$J" --target "$@") \
    > "$D/build-$name.log" 2>&1
}
ok=1
if [ -z "${SKIP_BUILD:-}" ]; then
  build base "-DCPU_PREFETCH_NEXT_TASK=0 -DCPU_FWD_RUNS=0" jattn_shared call_lab &
  P1=$!
  build runs "-DCPU_PREFETCH_NEXT_TASK=0" jattn_shared &
  P2=$!
  build new "" jattn_shared call_lab &
  P3=$!
  for p in $P1 $P2 $P3; do wait $p || ok=0; done
fi
if [ $ok = 0 ]; then
  echo "build failed:"
  tail -20 "$D"/build-*.log
  exit 1
fi
stamp "built"

# ---- 2. call_lab --------------------------------------------------------------------------
lab() { # build mode H S threads
  pin=$PIN1
  [ "$5" = 2 ] && pin=$PIN2
  OMP_PROC_BIND=true $pin "$W/$1/bench/call_lab" "$2" "$3" "$4" "$5" "$ROUNDS" > "$D/lab-$1-$2-$3-$4-$5.txt" 2>&1
  echo "== $1: $(head -1 "$D/lab-$1-$2-$3-$4-$5.txt")"
  tail -n +2 "$D/lab-$1-$2-$3-$4-$5.txt"
}
stamp "call_lab"
for t in 1 2; do
  lab new fwd 24 1536 $t
  lab base fwd 24 1536 $t
  lab new fwd 8 4608 $t
  lab new bwd 16 1536 $t
done

# ---- 3. interleaved with PyTorch ----------------------------------------------------------
LIBS="$W/base/libjattn.so $W/runs/libjattn.so $W/new/libjattn.so"
il() { # mode H S threads
  pin=$PIN1
  [ "$4" = 2 ] && pin=$PIN2
  stamp "interleaved $1 H=$2 S=$3 threads=$4 (jattn0 base, jattn1 runs, jattn2 new)"
  OMP_PROC_BIND=true $pin "$PY" bench/cpu/interleaved.py "$1" "$2" "$3" "$4" "$ROUNDS" $LIBS \
    > "$D/il-$1-$2-$3-$4.txt" 2>&1
  tail -n 4 "$D/il-$1-$2-$3-$4.txt"
}
for t in 1 2; do
  il fwd 24 1536 $t
  il fwd 8 4608 $t
done

# ---- 4. bits --------------------------------------------------------------------------------
stamp "hashes base vs new"
sh bench/cpu/hash_compare.sh "$W/base" "$W/new" avx512 1,2 > "$D/hashes.txt" 2>&1
tail -2 "$D/hashes.txt"
stamp "done"

# ---- the table ------------------------------------------------------------------------------
"$PY" - "$D" > "$D/summary.txt" << 'EOF'
import glob, os, re, statistics as st, sys
d = sys.argv[1]
print("## lab/cpu/xeon_ab.sh: the call against its task alone (% of the FMA peak per thread, CPU time)\n")
print(open(os.path.join(d, "machine.txt")).read().split("\n")[1])
print("\n| call_lab | peak/thread | hot | walk | walk kv0 | walk q0 | api | api alloc | GHz after api |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in sorted(glob.glob(os.path.join(d, "lab-*.txt"))):
    txt = open(f).read().split("\n")
    m = re.search(r"FMA peak per thread with \d+ running: ([\d.]+)", txt[0])
    rows = {}
    for line in txt[2:]:
        p = re.match(r"(\S+(?: \S+)?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line.strip())
        if p:
            rows[p.group(1)] = (p.group(3), p.group(6))
    name = os.path.basename(f)[4:-4]
    cells = [rows.get(k, ("-", "-"))[0] for k in ("hot", "walk", "walk kv0", "walk q0", "api", "api alloc")]
    print("| %s | %s | %s | %s |" % (name, m.group(1) if m else "-", " | ".join(cells), rows.get("api", ("-", "-"))[1]))
peak = {}
for t in (1, 2):
    try:
        first = open(os.path.join(d, "lab-new-fwd-24-1536-%d.txt" % t)).readline()
        peak[t] = float(re.search(r"running: ([\d.]+)", first).group(1))
    except (OSError, AttributeError):
        pass
print("\n| interleaved (GFLOP per CPU-s per thread) | base | runs | new | PyTorch | new %% of peak (%s) | new x base | new x PyTorch |"
      % ", ".join("%d thr %.0f" % kv for kv in sorted(peak.items())))
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in sorted(glob.glob(os.path.join(d, "il-*.txt"))):
    recs = {}
    threads = 1
    for line in open(f):
        if line.startswith("{"):
            import json
            r = json.loads(line)
            threads = r["threads"]
            recs.setdefault(r["who"], []).append(r["cpu_ms"])
    if not recs:
        continue
    H, S = re.match(r"il-\w+-(\d+)-(\d+)-\d+", os.path.basename(f)).groups()
    flop = 4.0 * int(H) * int(S) ** 2 * 128
    rate = {w: flop / (st.median(v) * 1e-3) * 1e-9 for w, v in recs.items()}  # per CPU-second: per thread
    g = lambda w: "%.1f" % rate[w] if w in rate else "-"
    ratio = lambda a, b: "%.3fx" % (rate[a] / rate[b]) if a in rate and b in rate else "-"
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (os.path.basename(f)[3:-4], g("jattn0"), g("jattn1"), g("jattn2"),
          g("torch"), "%.0f %%" % (100 * rate["jattn2"] / peak[threads]) if "jattn2" in rate and threads in peak else "-", ratio("jattn2", "jattn0"),
          ratio("jattn2", "torch")))
h = open(os.path.join(d, "hashes.txt")).read().strip().split("\n")
print("\nbits base vs new: " + "; ".join(h[-2:]))
EOF
(cd "$W" && tar -czf "$OUT/xeon_ab.tar.gz" details)
cp "$D/summary.txt" "$OUT/summary.txt"
cat "$D/summary.txt"
