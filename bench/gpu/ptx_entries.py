"""Entry by entry: the kernels of a PTX file before a change against the same kernels after it, for a file that
ptx_compare.sh finds different as a whole because the change added kernels (new template instances beside
the old ones) or moved them. Each entry (.entry / .func) of BEFORE is found in AFTER by its demangled name,
read with the rename RENAMES gives (a template argument appended to the old instances: "<1, 2>" before is
"<1, 2, false>" after), and its body compared with the entry's own name and the anonymous namespace's hash
left out: "same" when the text is the same, "same (registers renamed)" when it is once the virtual
registers are numbered by first use and the branch labels lose their function number (the same
instructions on the same values: the same bits), else "DIFF" with the start of a diff.

usage: python3 ptx_entries.py BEFORE.ptx AFTER.ptx [DIFF_LINES]
  RENAMES (environment): "old=>new;..." substitutions applied to the after names' demangled text before
  matching (default: the backward v3's masked instances, ", false>" => ">" and its parameter types)
exit 0 when every entry of BEFORE is the same in AFTER, 1 otherwise.
"""

import difflib
import os
import re
import subprocess
import sys

DEFAULT_RENAMES = (
    ", false>=>>;V3ParamsOf<false>::type=>BwdV3Params;"
    "bwd_v3_split<false>(SplitParamsOf<false>::type)=>bwd_v3_split(BwdV3SplitParams)"
)


def entries(path):
    txt = open(path).read()
    out = {}
    for m in re.finditer(r"^(?:\.visible |\.weak )?\.(entry|func)\s+(?:\([^)]*\)\s*)?(\S+?)\(", txt, re.M):
        end = txt.index("\n}\n", m.start()) + 3
        out[m.group(2)] = txt[m.start() : end]
    return out


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, r))


def canon(t):
    t = re.sub(r"\$L__BB\d+_", "$L__BB_", t)
    t = "\n".join(line for line in t.split("\n") if not line.strip().startswith(".reg "))
    seen = {}

    def rep(m):
        d = seen.setdefault(m.group(1), {})
        d.setdefault(m.group(0), len(d))
        return "%%%s_%d" % (m.group(1), d[m.group(0)])

    return re.sub(r"%(rd|rs|fd|f|r|p|h|hh|b)(\d+)\b", rep, t)


def key(d, renames):
    d = re.sub(r"_GLOBAL__N__\w+|_INTERNAL_\w+", "NS", d)
    d = re.sub(r"\(anonymous namespace\)::", "", d)
    d = re.sub(r"^void ", "", d)
    for old, new in renames:
        d = d.replace(old, new)
    return d


def main() -> None:
    a, b = entries(sys.argv[1]), entries(sys.argv[2])
    lines = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    renames = [r.split("=>") for r in os.environ.get("RENAMES", DEFAULT_RENAMES).split(";") if "=>" in r]
    da, db = demangle(list(a)), demangle(list(b))
    by_key = {key(db[n], renames): n for n in b}
    same = diff = 0
    for n in a:
        k = key(da[n], [])
        if k not in by_key:
            print("MISSING", k[:100])
            diff += 1
            continue
        nb = by_key[k]
        ta = re.sub(r"_GLOBAL__N__\w+", "NS", a[n].replace(n, "NAME"))
        tb = re.sub(r"_GLOBAL__N__\w+", "NS", b[nb].replace(nb, "NAME"))
        raw = ta == tb
        ca, cb = canon(ta), canon(tb)
        if ca == cb:
            same += 1
            print("same" if raw else "same (registers renamed)", k[:100])
        else:
            diff += 1
            print("DIFF", k[:100])
            if lines:
                print("\n".join(list(difflib.unified_diff(ca.split("\n"), cb.split("\n"), lineterm="", n=1))[:lines]))
    print(f"ptx_entries: {same} same, {diff} different or missing")
    sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
