"""Static port analysis of the cpu backend's hot loops: each inner loop cut out of the AVX-512
object file (objdump) and run through llvm-mca for several cores.

usage: python3 lab/cpu/mca_loops.py OBJECT.o [LLVM_MCA] [CPU ...]
  OBJECT.o   e.g. build/CMakeFiles/jattn_objects.dir/src/cpu/cpu_kernels_avx512.c.o
  LLVM_MCA   default llvm-mca-19 (Debian: apt-get install llvm-19)
  CPU        default sapphirerapids emeraldrapids znver4, and skylake-avx512 by llvm-mca-14 when
             that is installed (LLVM 14's model has Intel's two 512-bit FMA ports; LLVM 19's
             sapphirerapids, emeraldrapids and icelake-server models put 512-bit FMAs on port 0
             only, one a cycle, which is not the two-FMA-port Xeon measured here)

The loops are found by their instruction mix (innermost backward branches): the plain and the
compensated scores tiles, P V, the softmax's exp loop, bwd_outer (dK, dV) and bwd_probs' exp.
Per loop and core: llvm-mca's cycles per iteration, the FMAs in it, and the FMA efficiency
FMAs / (zmm FMAs a cycle in the model x cycles): 2 in skylake-avx512 (LLVM 14), 1 in the others
(znver4: its two 256-bit pipes; LLVM 19's Intel models: port 0 only). Beside them the loop's own count of the vector operations that
share Intel's two FMA ports (ports 0 and 5: adds, subs, min/max, compares, blends, rounds,
scalef, shuffles; copies between registers excluded) per FMA: on Zen those run on other pipes.
"""

import re
import subprocess
import sys

P05 = re.compile(
    r"^v(add|sub|min|max|cmp|blendm|rndscale|scalef|shuf|perm|unpck|insert|extract|reduce|round|and|or|xor)"
)


def parse(dump):
    ins, fn = [], None
    for line in dump.split("\n"):
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m:
            ins.append((fn, int(m.group(1), 16), m.group(2), re.sub(r"\s*#.*$", "", m.group(3))))
    return ins


def loops(ins):
    at = {(f, a): i for i, (f, a, _, _) in enumerate(ins)}
    out = []
    for i, (f, a, op, args) in enumerate(ins):
        if not op.startswith("j"):
            continue
        m = re.match(r"([0-9a-f]+)\s", args)
        if not m or (f, int(m.group(1), 16)) not in at or int(m.group(1), 16) >= a:
            continue
        lo, hi = int(m.group(1), 16), a
        body = ins[at[(f, lo)] : i + 1]

        def inside(x):
            t = re.match(r"([0-9a-f]+)\s", x[3])
            return t is not None and lo <= int(t.group(1), 16) <= hi

        if any(x[2].startswith("j") and inside(x) for x in body[:-1]) or any(x[2] in ("call", "ret") for x in body):
            continue  # innermost bodies only: no branch within (exits allowed), no calls
        out.append((f, body))
    return out


def mix(body):
    n = {"fma": 0, "p05": 0, "bcast": 0, "all": len(body)}
    for _, _, op, args in body:
        if "fmadd" in op or "fmsub" in op or "fnmadd" in op:
            n["fma"] += 1
        elif op == "vbroadcastss":
            n["bcast"] += 1
        elif P05.match(op) and "zmm" in args and not (op.startswith("vxorps") and "xmm" in args):
            n["p05"] += 1
    return n


def classify(f, n, body):
    ops = " ".join(x[2] for x in body)
    if "softmax" in f and "vrndscaleps" in ops:
        return "softmax exp2 (low parts)" if ops.count("vsubps") >= 3 else "softmax exp2 (plain)"
    if f.endswith("_task") and "vrndscaleps" in ops and n["fma"] <= 12:
        return "softmax exp2 (plain, in the task)"
    if "bwd_tile" in f and "vrndscaleps" in ops and n["fma"] <= 12:
        return "bwd_probs exp2"
    if "bwd_outer" in f and n["fma"] == 24:
        return "bwd_outer 6x4 (dK, dV)"
    if n["fma"] == 24 and n["bcast"] == 8 and n["p05"] == 0:
        return "P V 8x48 (and dQ)"
    if n["fma"] == 384 and n["p05"] >= 48:
        return "scores compensated (asm 4x48, 2 blocks)"
    if n["fma"] == 384 and n["p05"] == 0:
        return "scores plain 8x48 (a block of 16)"
    if n["fma"] == 192 and n["p05"] == 0:
        return "scores plain 4x48 (a block of 16)"
    return None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    obj, mca = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "llvm-mca-19"
    cpus = [(mca, c) for c in sys.argv[3:]] or [(mca, "sapphirerapids"), (mca, "emeraldrapids"), (mca, "znver4")]
    if not sys.argv[3:] and subprocess.run(["sh", "-c", "command -v llvm-mca-14"], capture_output=True).returncode == 0:
        cpus.append(("llvm-mca-14", "skylake-avx512"))
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True).stdout
    seen = {}
    for f, body in loops(parse(dump)):
        n = mix(body)
        name = classify(f, n, body)
        if name and name not in seen:
            seen[name] = (f, body, n)
    print("%-42s %5s %5s  %s" % ("loop", "FMA", "p05/FMA", "  ".join("%-24s" % (c + "/" + t[-2:]) for t, c in cpus)))
    for name, (_f, body, n) in seen.items():
        asm = "\n".join("\t%s %s" % (op, args) for _, _, op, args in body if not op.startswith("j"))
        cells = []
        for tool, cpu in cpus:
            r = subprocess.run(
                [tool, "-mtriple=x86_64", "-mcpu=" + cpu, "-iterations=200"], input=asm, capture_output=True, text=True
            )
            m = re.search(r"Total Cycles:\s+(\d+)", r.stdout)
            if not m:
                cells.append("%-24s" % "n/a")
                continue
            cyc = int(m.group(1)) / 200.0
            ports = 2 if cpu == "skylake-avx512" else 1  # zmm FMAs a cycle in the model
            cells.append("%-24s" % ("%.1f cyc, %.0f%% FMA" % (cyc, 100.0 * n["fma"] / ports / cyc)))
        p05 = "%.3f" % (n["p05"] / n["fma"]) if n["fma"] else "-"
        print("%-42s %5d %7s  %s" % (name, n["fma"], p05, "  ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
