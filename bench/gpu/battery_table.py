"""The table of bench/gpu/battery.sh: one row per process of the battery (its part, status, the checks it
passed and failed, seconds), one per part, the failures' lines, ptxas' registers and spills of the kernels,
and the results' README. Reads LOGS/<name>.log and LOGS/<name>.status ("part rc seconds cap"); writes
OUT/table.txt, OUT/failures.txt, OUT/build.txt and OUT/README.md. Standard library only.

usage: python3 bench/gpu/battery_table.py LOGS MACHINE_TXT OUT
"""

import os
import re
import sys

PARTS = ("build", "faults", "suites", "load", "threads", "sweep", "sanitizer", "python")
TALLY = re.compile(r"^(\S[^:\n]*): (\d+) passed, (\d+) failed")
PYTEST = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")
SAN_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) error")
SAN_HAZARDS = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def row_of(name, status, log):
    """(part, name, verdict, passed, failed, seconds, note) of one process."""
    fields = status.split()
    part = fields[0] if fields else "?"
    rc = int(fields[1]) if len(fields) > 1 and fields[1].lstrip("-").isdigit() else -1
    secs = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
    cap = fields[3] if len(fields) > 3 else "?"
    passed = failed = 0
    notes = []
    tallies = [m for m in (TALLY.match(line) for line in log.splitlines()) if m]
    if tallies:
        passed, failed = int(tallies[-1].group(2)), int(tallies[-1].group(3))
    if part == "python":
        lines = [line for line in log.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        if lines:
            counts = {k.rstrip("s"): int(n) for n, k in PYTEST.findall(lines[-1])}
            passed, failed = counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0)
            if counts.get("skipped"):
                notes.append(f"{counts['skipped']} skipped")
    if part == "sanitizer":
        errs = [int(x) for x in SAN_ERRORS.findall(log)]
        haz = SAN_HAZARDS.findall(log)
        if haz:
            e = int(haz[-1][1]) + int(haz[-1][2])
            notes.append(f"racecheck {haz[-1][0]} hazards ({haz[-1][1]} errors, {haz[-1][2]} warnings)")
            failed += e
        elif errs:
            notes.append(f"{errs[-1]} sanitizer errors")
            failed += errs[-1]
        else:
            notes.append("no sanitizer summary")
        ran = re.findall(r"kernels that ran:(.*)", log)
        if ran:
            notes.append("ran:" + ran[-1])
    seed = re.findall(r"seed (\d+)", log)
    if seed and failed:
        notes.append(f"seed {seed[-1]}")
    if name == "build":
        verdict = "PASS" if rc == 0 else "TIMEOUT" if rc in (124, 137) else "FAIL"
    elif rc == 77 or (rc == 0 and "SKIP" in log and not tallies):
        verdict = "SKIP"
        skip = [line for line in log.splitlines() if "SKIP" in line or line.startswith("skip ")]
        if skip:
            notes.append(skip[0][:100])
    elif rc in (124, 137):
        verdict = "TIMEOUT"
        notes.append(f"cap {cap} s")
    elif rc == 0 and failed == 0 and (passed > 0 or part in ("build",)):
        verdict = "PASS"
    else:
        verdict = "FAIL"
        if rc not in (0, 1):
            notes.append(f"rc {rc}")
    skips = [line for line in log.splitlines() if line.startswith("skip ")]
    if skips and verdict != "SKIP":
        notes.append(f"{len(skips)} skipped: {skips[0][5:90]}")
    return part, name, verdict, passed, failed, secs, "; ".join(notes)


def build_summary(log):
    """ptxas: (entry, registers, stack, spill stores, spill loads) per kernel entry (sm_90a)."""
    rows, fn, stack = [], None, (0, 0, 0)
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            stack = tuple(int(x) for x in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            rows.append((fn, int(m.group(1))) + stack)
            fn, stack = None, (0, 0, 0)
    return sorted(set(rows))


def main():
    logs, machine_txt, out = sys.argv[1:4]
    names = sorted(f[: -len(".status")] for f in os.listdir(logs) if f.endswith(".status"))
    rows = [row_of(n, read(os.path.join(logs, n + ".status")), read(os.path.join(logs, n + ".log"))) for n in names]
    rows.sort(key=lambda r: (PARTS.index(r[0]) if r[0] in PARTS else len(PARTS), r[1]))
    # failures: the FAIL lines of every process that did not pass
    fails = []
    for part, name, verdict, *_ in rows:
        if verdict in ("FAIL", "TIMEOUT"):
            lines = [
                line
                for line in read(os.path.join(logs, name + ".log")).splitlines()
                if re.match(r"\s*(FAIL|=+ (ERROR|Error|Race|Invalid|Uninit))|Traceback|Error", line)
            ]
            fails.append(f"== {name} ({part}): {verdict}")
            fails.extend(lines[:40] or read(os.path.join(logs, name + ".log")).splitlines()[-15:])
    with open(os.path.join(out, "failures.txt"), "w") as f:
        f.write("\n".join(fails) + ("\n" if fails else "no failure\n"))
    # ptxas
    entries = build_summary(read(os.path.join(logs, "build.log")))
    spilled = [e for e in entries if e[2] or e[3] or e[4]]
    with open(os.path.join(out, "build.txt"), "w") as f:
        f.write("ptxas (sm_90a): kernel entry | registers | stack frame, spill stores, spill loads (bytes)\n")
        for e in entries:
            f.write(f"{e[0]} | {e[1]} | {e[2]}, {e[3]}, {e[4]}\n")
    # the table
    w = max([len(r[1]) for r in rows] + [10])
    lines = [f"{'part':10} {'process':{w}} {'status':7} {'passed':>7} {'failed':>6} {'s':>5}  note"]
    for part, name, verdict, passed, failed, secs, note in rows:
        lines.append(f"{part:10} {name:{w}} {verdict:7} {passed:7d} {failed:6d} {secs:5d}  {note}")
    lines.append("")
    lines.append(
        f"{'part':10} {'processes':>9} {'pass':>5} {'fail':>5} {'timeout':>7} {'skip':>5} {'checks passed':>14} "
        f"{'failed':>7} {'s (longest)':>12}"
    )
    total_bad = 0
    for part in PARTS + tuple(sorted({r[0] for r in rows} - set(PARTS))):
        rs = [r for r in rows if r[0] == part]
        if not rs:
            continue
        n = {v: sum(1 for r in rs if r[2] == v) for v in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
        total_bad += n["FAIL"] + n["TIMEOUT"]
        lines.append(
            f"{part:10} {len(rs):9d} {n['PASS']:5d} {n['FAIL']:5d} {n['TIMEOUT']:7d} {n['SKIP']:5d} "
            f"{sum(r[3] for r in rs):14d} {sum(r[4] for r in rs):7d} {max(r[5] for r in rs):12d}"
        )
    if entries:
        lines.append(
            f"ptxas: {len(entries)} kernel entries, {len(spilled)} with local memory"
            + (": " + ", ".join(e[0][:60] for e in spilled[:4]) if spilled else "")
        )
    skipped = sum(1 for r in rows if r[2] == "SKIP")
    if total_bad:
        verdict = f"BATTERY FAIL: {total_bad} processes failed or timed out"
    elif skipped or not rows:
        verdict = f"BATTERY INCOMPLETE: no failure, {skipped} processes skipped (see their notes)"
    else:
        verdict = f"BATTERY PASS: {len(rows)} processes"
    lines.append(verdict)
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "table.txt"), "w") as f:
        f.write(table)
    machine = read(machine_txt)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(
            "# The GPU reliability battery (issue 37)\n\n"
            "`bench/gpu/battery.sh`: every GPU suite under concurrent load, many host threads at once, "
            "compute-sanitizer on every kernel, the randomised sweep, an allocation failure and the calls the "
            "library must refuse (the script's opening comment says what each step does).\n\n"
            "```\n" + machine + "```\n\n"
            "Files: `table.txt` (below), `failures.txt` (the FAIL lines of every process that did not pass), "
            "`build.txt` (ptxas' registers and spills of every kernel entry), `logs.tgz` (every log; each "
            "suite's prints its seed: `JATTN_TEST_SEED` replays it).\n\n"
            "```\n" + table + "```\n"
        )


if __name__ == "__main__":
    main()
