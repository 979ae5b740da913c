#!/usr/bin/env python3
"""The README's table of measured speed, generated from bench/results/.

Reads a manifest (default: bench/results/readme_table.json), takes each row's two figures (jattn's
and the peer's, measured in the same run) out of the results files it names, and prints the markdown
table: what was measured, the machine and date, jattn's figure, the peer's, the ratio of their
speeds, and the results folder. README.md holds that output between the two marker lines below;
tests/test_docs.sh runs `--check README.md`, so the table cannot drift from the results.

    python3 bench/readme_table.py                     # print the table
    python3 bench/readme_table.py --write README.md   # replace the table between the markers
    python3 bench/readme_table.py --check README.md   # exit 1 (with a diff) if it differs

A row of the manifest is one line of JSON:

    {"what": "forward (1,24,1536,128) f32", "machine": "H100 SXM 80GB", "date": "2026-12-06",
     "unit": "ms", "better": "lower", "peer_name": "PyTorch fp32 SDPA",
     "jattn": SOURCE, "peer": SOURCE}

`better` is "lower" for times (the ratio is the peer's time over jattn's) and "higher" for rates
(jattn's rate over the peer's): above 1x, jattn is faster. A SOURCE names a file under the results
folder and one of three ways to read one number from it; each must match exactly once:

    {"file": "RUN/bench.log", "json": {"seq_q": 1536, "dim": 128}, "field": "ms"}
        the one JSON object on a line of the file whose keys have these values; its `field`
    {"file": "RUN/torch.log", "regex": "^RESULT forward 1 24 1536 128 (\\\\S+)"}
        the first group of the one line the regular expression matches
    {"file": "RUN/README.md", "table": {"(1,24,S,D)": "1536, 128"}, "column": "v4 ms"}
        the cell in column `column` of the one markdown table row whose cells under these headers
        hold these values (a number is read from the start of the cell: "102.4 (77 %)" is 102.4)

Both sources of a row must lie in the same run's folder (the first component of `file`): a peer
"in the same run" is checked, not assumed. Standard library only.
"""

import argparse
import difflib
import json
import os
import re
import sys

BEGIN = "<!-- readme-table: begin (bench/readme_table.py writes this table from bench/results/readme_table.json) -->"
END = "<!-- readme-table: end -->"
HEADER = (
    "| what | machine, date | jattn | peer, in the same run | jattn's speed vs the peer | results |\n"
    "| --- | --- | ---: | ---: | ---: | --- |"
)
NUMBER = re.compile(r"^\s*[*_]*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


class ManifestError(Exception):
    pass


def read_text(results, rel):
    path = os.path.join(results, rel)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ManifestError(f"{rel}: {e.strerror}") from e


def number(text, where):
    m = NUMBER.match(str(text))
    if not m:
        raise ManifestError(f"{where}: no number in {text!r}")
    return float(m.group(1))


def from_json(text, rel, match, field):
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and all(obj.get(k) == v for k, v in match.items()):
            found.append(obj)
    if len(found) != 1:
        raise ManifestError(f"{rel}: {len(found)} JSON lines match {match} (need exactly 1)")
    if field not in found[0]:
        raise ManifestError(f"{rel}: the line matching {match} has no field {field!r}")
    return number(found[0][field], f"{rel} {field}")


def from_regex(text, rel, pattern):
    rx = re.compile(pattern)
    found = [m for m in (rx.search(line) for line in text.splitlines()) if m]
    if len(found) != 1:
        raise ManifestError(f"{rel}: {len(found)} lines match {pattern!r} (need exactly 1)")
    return number(found[0].group(1), f"{rel} {pattern!r}")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def from_table(text, rel, match, column):
    found = []
    header = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
            continue
        row = cells(line)
        if header is None:
            header = row
            continue
        if all(set(c) <= set("-: ") for c in row):
            continue
        if column not in header or not all(k in header for k in match):
            continue
        named = dict(zip(header, row))
        if all(named.get(k) == v for k, v in match.items()):
            found.append(named[column])
    if len(found) != 1:
        raise ManifestError(f"{rel}: {len(found)} table rows match {match} with a column {column!r} (need exactly 1)")
    return number(found[0], f"{rel} {column}")


def value(results, src):
    rel = src.get("file")
    if not rel:
        raise ManifestError(f"a source without a file: {src}")
    text = read_text(results, rel)
    if "json" in src:
        return from_json(text, rel, src["json"], src.get("field", ""))
    if "regex" in src:
        return from_regex(text, rel, src["regex"])
    if "table" in src:
        return from_table(text, rel, src["table"], src.get("column", ""))
    raise ManifestError(f"{rel}: the source says neither json, regex nor table: {src}")


def fmt(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    if x >= 0.1:
        return f"{x:.3f}"
    return f"{x:.3g}"


def table(manifest_path, results):
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ManifestError(f"{manifest_path}: {e}") from e
    rel_results = manifest.get("results", "bench/results")
    lines = [HEADER]
    for i, row in enumerate(manifest.get("rows", [])):
        try:
            what, unit, better = row["what"], row["unit"], row["better"]
            where = f"{row['machine']}, {row['date']}"
            jsrc, psrc, peer = row["jattn"], row["peer"], row["peer_name"]
        except KeyError as e:
            raise ManifestError(f"row {i + 1}: no {e}") from e
        runs = {s["file"].split("/")[0] for s in (jsrc, psrc)}
        if len(runs) != 1:
            raise ManifestError(f"row {i + 1} ({what}): jattn and the peer come from different runs: {sorted(runs)}")
        folder = os.path.commonpath([os.path.dirname(jsrc["file"]), os.path.dirname(psrc["file"])])
        j, p = value(results, jsrc), value(results, psrc)
        if j <= 0 or p <= 0:
            raise ManifestError(f"row {i + 1} ({what}): a figure is not positive (jattn {j}, peer {p})")
        if better == "lower":
            ratio = p / j
        elif better == "higher":
            ratio = j / p
        else:
            raise ManifestError(f"row {i + 1} ({what}): better is {better!r}, not 'lower' or 'higher'")
        lines.append(
            f"| {what} | {where} | {fmt(j)} {unit} | {peer} {fmt(p)} {unit} | {ratio:.2f}x | "
            f"[`{folder}/`]({rel_results}/{folder}/) |"
        )
    return "\n".join(lines) + "\n"


def between_markers(text, path):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b:
        raise ManifestError(f"{path}: no table between the lines\n  {BEGIN}\n  {END}")
    start = b + len(BEGIN) + 1
    return start, e


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default=os.path.join(root, "bench", "results", "readme_table.json"))
    ap.add_argument("--results", help="the results folder (default: the manifest's folder)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="replace the table between the markers of this file")
    group.add_argument("--check", metavar="README", help="exit 1 if this file's table is not the generated one")
    args = ap.parse_args()
    results = args.results or os.path.dirname(os.path.abspath(args.manifest))
    try:
        generated = table(args.manifest, results)
        if not args.write and not args.check:
            sys.stdout.write(generated)
            return 0
        path = args.write or args.check
        with open(path, encoding="utf-8") as f:
            text = f.read()
        start, end = between_markers(text, path)
        if args.write:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text[:start] + generated + text[end:])
            print(f"{path}: the table written ({generated.count(chr(10)) - 2} rows)")
            return 0
        if text[start:end] == generated:
            print(f"{path}: the table is the generated one ({generated.count(chr(10)) - 2} rows)")
            return 0
        print(f"{path}: the table differs from what bench/readme_table.py generates from the results:")
        diff = difflib.unified_diff(
            text[start:end].splitlines(), generated.splitlines(), "README (as written)", "generated", lineterm=""
        )
        for line in diff:
            print("  " + line)
        print("  (run: python3 bench/readme_table.py --write README.md)")
        return 1
    except ManifestError as e:
        print(f"readme_table: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
