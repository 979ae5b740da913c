"""The table of lab/gpu/backward_v4_run.sh (issue 36's second backward v4 call): usage: python3 backward_v4_table.py OUT

Reads the logs the script leaves in OUT and prints: the build (the variants' spills), the battery's tallies, the
command's checks (a tf32 backward judged against the tf32 gate, rel_l2 <= 1e-3), compute-sanitizer, the variants'
float64 checks at small shapes, their bit-equal groups and differences from the backward v3, and per shape every
variant's time beside jattn's forward and PyTorch's fp32 SDPA backward (issue 36: at most 3.5x the forward, aim 3.0x;
at least 3.5x PyTorch)."""

import json
import os
import re
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
F32_GATE, TF32_GATE = 5e-6, 1e-3
VARIANTS = ["r1", "sk", "ov", "ov+sk", "dq", "dq+sk", "fix", "fix+sk", "lib"]


def lines(name):
    try:
        return open(os.path.join(OUT, name), errors="replace").read().splitlines()
    except OSError:
        return []


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


print("== backward v4, second call (issue 36)")
for l in lines("smi.txt")[1:3]:
    print("device / tree:", l)
print("build:", " ".join(l for l in lines("build.log") if " rc " in l))
for l in lines("tune_spills.txt"):
    print("variants' ptxas:", " ".join(l.split()))

for l in lines("probe.log"):
    if l.startswith("{"):
        try:
            j = json.loads(l)
            print(
                f"probe (2,300x200,128) {j.get('kernel')}: pass={j.get('pass')} rel_l2 dq/dk/dv "
                f"{j.get('dq_rel_l2', 0):.3g} {j.get('dk_rel_l2', 0):.3g} {j.get('dv_rel_l2', 0):.3g}"
            )
        except ValueError:
            pass
    elif "HANGS" in l:
        print("probe:", l)

print("-- the battery (AUTO: v4 where it takes the call)")
tp = tf = 0
names = (
    sorted(n[2:-4] for n in os.listdir(OUT) if n.startswith("t_") and n.endswith(".log")) if os.path.isdir(OUT) else []
)
for part in names:
    if part in ("check", "memcheck", "racecheck", "synccheck", "memcheck_lib", "racecheck_kernels"):
        continue
    ls = lines(f"t_{part}.log")
    tally = [l for l in ls if re.search(r"\d+ passed, \d+ failed", l)]
    kern = [l for l in ls if l.startswith("backward on")]
    fails = [l for l in ls if l.startswith("FAIL")]
    rc = [l for l in ls if l.startswith("rc ")]
    if tally:
        m = re.search(r"(\d+) passed, (\d+) failed", tally[-1])
        tp += int(m.group(1))
        tf += int(m.group(2))
    print(
        f"{part:12s} {tally[-1] if tally else '(no tally) ' + (rc[-1] if rc else '')}"
        + (f"  [{kern[0][12:]}]" if kern and part == "gate" else "")
    )
    for l in fails[:3]:
        print("   ", l[:220])
print(f"test_backward parts: {tp} passed, {tf} failed")
for l in lines("t_check.log"):
    if not l.startswith("{"):
        continue
    try:
        j = json.loads(l)
    except ValueError:
        continue
    rel = {k[:-7]: j[k] for k in j if k.endswith("_rel_l2")}
    tf32 = j.get("kernel", "").find("grads_f16") >= 0 or j.get("precision") == "tf32"
    gate = TF32_GATE if tf32 else F32_GATE
    ok = all(v <= gate for v in rel.values())
    print(
        f"check S={j['seq_q']}x{j['seq_kv']} D={j['dim']} {j['kernel']}: "
        + " ".join(f"{k} {v:.3g}" for k, v in rel.items())
        + f" -> {'ok' if ok else 'OVER'} the {'tf32' if tf32 else 'f32'} gate {gate:g}"
    )
for t in ("memcheck", "racecheck", "synccheck", "memcheck_lib", "racecheck_kernels"):
    ls = lines(f"t_{t}.log")
    summ = [l for l in ls if "ERROR SUMMARY" in l or "RACECHECK SUMMARY" in l]
    rc = [l for l in ls if l.startswith("rc ")]
    small = [l for l in ls if l.startswith("V4SMALL")]
    bad = [l for l in small if "pass=0" in l]
    print(
        f"{t}: {summ[-1].strip() if summ else '(no summary)'} {rc[-1] if rc else ''}"
        + (f"; its small checks {len(small) - len(bad)}/{len(small)} pass" if small else "")
    )

print("-- the variants: float64 checks at small shapes (each gradient within 5e-6, or 2x the backward v3's)")
small = {}
tune = {}
errors = []
for l in lines("tune.log"):
    if l.startswith("V4SMALL"):
        f = fields(l)
        small.setdefault(f["var"], []).append(f)
    elif l.startswith("V4TUNE"):
        f = fields(l)
        tune[(f["var"], f["shape"], f["prec"])] = f
    elif l.startswith("FAIL") or "rror" in l:
        errors.append(l)
for v in VARIANTS:
    ls = small.get(v, [])
    bad = [f for f in ls if f["pass"] != "1"]
    worst = max((max(float(f["dq"]), float(f["dk"]), float(f["dv"])) for f in ls), default=0)
    print(
        f"{v:7s} {len(ls) - len(bad)}/{len(ls)} pass, worst rel_l2 {worst:.3g}"
        + "".join(f"; FAIL {f['case']} dq/dk/dv {f['dq']} {f['dk']} {f['dv']} (v3 {f['v3']})" for f in bad)
    )
for l in errors[:8]:
    print("  ", l[:220])

print("-- the variants at the timed shapes: bits (groups that must be equal), v3 difference, repeat bits")
shapes = sorted({(k[1], k[2]) for k in tune}, key=lambda s: (s[1], int(s[0].split(",")[3]), int(s[0].split(",")[2])))
for sh, prec in shapes:

    def h(v):
        f = tune.get((v, sh, prec))
        return f["hash"].split("/") if f else None

    msgs = []
    for a, b, which in (
        ("ov", "r1", 3),
        ("dq", "r1", 3),
        ("ov+sk", "sk", 3),
        ("dq+sk", "sk", 3),
        ("fix", "r1", 2),
        ("fix+sk", "sk", 2),
    ):
        ha, hb = h(a), h(b)
        if ha and hb:
            same = ha[3 - which :] == hb[3 - which :]
            msgs.append(f"{a}={b}{'' if which == 3 else '(dk,dv)'}:{'ok' if same else 'DIFF'}")
    lib = tune.get(("lib", sh, prec))
    if lib and h("dq+sk" if lib["split"] == "1" else "dq"):
        ref = "dq+sk" if lib["split"] == "1" else "dq"
        msgs.append(f"lib={ref}:{'ok' if h('lib') == h(ref) else 'DIFF'}")
    worst = max(
        (max(float(x) for x in f["vs_v3"].split(",")) for k, f in tune.items() if k[1:] == (sh, prec)), default=0
    )
    dets = [k[0] for k, f in tune.items() if k[1:] == (sh, prec) and f["det"] != "ok"]
    nonf = [k[0] for k, f in tune.items() if k[1:] == (sh, prec) and f.get("nonfinite", "0") != "0"]
    print(
        f"{sh} {prec}: "
        + " ".join(msgs)
        + f"; largest difference from v3 {worst:.3g}"
        + (f"; repeat bits differ: {dets}" if dets else "; repeats bit-identical")
        + (f"; NON-FINITE in {nonf}" if nonf else "")
    )

print("-- times (ms, median; x fwd = backward / jattn's forward; PT/ = PyTorch fp32 backward / it)")
fwd, lib_ms = {}, {}
tag = "?"
for l in lines("bench.log"):
    if l.startswith("TAG "):
        tag = l.split()[1]
    elif l.startswith("{"):
        try:
            j = json.loads(l)
        except ValueError:
            continue
        key = f"{j['batch']},{j['heads']},{j['seq_q']},{j['dim']}"
        prec = (
            "tf32"
            if j.get("precision") == "tf32" or "grads_f16" in j.get("kernel", "") or "pv_f16" in j.get("kernel", "")
            else "f32"
        )
        (fwd if tag == "forward" else lib_ms)[(key, prec)] = (j["ms"], j.get("kernel"))
torch = {}
for l in lines("torch.log"):
    if l.startswith("RESULT") and l.split()[1] == "backward-default":
        f = l.split()
        torch[f"{f[2]},{f[3]},{f[4]},{f[5]}"] = float(f[6])
for sh, prec in shapes:
    fw = fwd.get((sh, prec), (None, None))[0]
    pt = torch.get(sh) if prec == "f32" else None
    s, d = int(sh.split(",")[2]), int(sh.split(",")[3])
    print(
        f"({sh}) {prec}: forward {fw if fw else '-'} ms, PyTorch backward {pt if pt else '-'} ms, library backward "
        f"(jattn run) {lib_ms.get((sh, prec), ('-',))[0]} ms [{lib_ms.get((sh, prec), (0, '-'))[1]}]"
    )
    best = None
    for v in VARIANTS:
        f = tune.get((v, sh, prec))
        if not f:
            continue
        ms = float(f["ms"])
        x = f"{ms / fw:5.2f}x fwd" if fw else "   -    "
        p = f"PT/ {pt / ms:5.2f}" if pt else ""
        print(f"    {v:7s} split {f['split']} {ms:9.3f} ms {float(f['tflops']):6.1f} TFLOP/s  {x}  {p}")
        if best is None or ms < best[1]:
            best = (v, ms)
    if best:
        print(
            f"    fastest: {best[0]}"
            + (f" ({best[1] / fw:.2f}x the forward" if fw else "")
            + (f", {pt / best[1]:.2f}x PyTorch)" if pt else ")" if fw else "")
        )
print(
    "targets (issue 36): backward <= 3.5x jattn's forward (aim 3.0x) and >= 3.5x PyTorch at (1,24,1536/4608/16384,128)"
)

for l in lines("ncu_full.txt"):
    if re.search(
        r"bwd_v4|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued", l
    ):
        print("ncu:", " ".join(l.split())[:150])
