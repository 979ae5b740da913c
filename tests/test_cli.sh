#!/bin/sh
# End-to-end tests of the jattn command (argument: the built jattn).
#
#  - run on small shapes with --check passes; the default job's shape is the FLUX one;
#  - --json prints exactly one JSON object on one line with the documented keys (parsed by
#    python3 when present, else the keys are grepped);
#  - .npy in and out: q, k, v written by `jattn gen` (3-d and 4-d, cross-attention), the output
#    of the best backend compared with the ref backend's by `jattn compare`, and, when python3
#    is present, the written files parsed independently (header, token-major layout) and the
#    attention recomputed in plain Python from the input files;
#  - bench rows (ref backend, two thread counts) with --json;
#  - every error exit: code, exactly one line on stderr starting "jattn: " and naming the
#    problem, and no output file left behind when an output cannot be written.
# Documented choice: an unwritable --out or --lse exits 1 (runtime failure), before any work.
set -u
J=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/test_cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
have_python=0
if command -v python3 >/dev/null 2>&1 && python3 -c 'import json, ast, struct, math' 2>/dev/null; then have_python=1; fi

# expect_ok WHAT NEEDLE CMD...: exit 0, NEEDLE (fixed string) in stdout, nothing on stderr.
expect_ok() {
    what=$1 needle=$2
    shift 2
    "$@" >"$T/stdout" 2>"$T/stderr"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$what: exit $rc, want 0: $(cat "$T/stderr")"
    elif [ -s "$T/stderr" ]; then
        fail "$what: unexpected stderr: $(cat "$T/stderr")"
    elif [ -n "$needle" ] && ! grep -qF -- "$needle" "$T/stdout"; then
        fail "$what: stdout lacks '$needle': $(cat "$T/stdout")"
    else
        pass
    fi
}

# expect_error WHAT CODE NEEDLE CMD...: exit CODE, exactly one stderr line "jattn: ..." holding NEEDLE.
expect_error() {
    what=$1 code=$2 needle=$3
    shift 3
    "$@" >"$T/stdout" 2>"$T/stderr"
    rc=$?
    lines=$(wc -l <"$T/stderr" | tr -d ' ')
    if [ $rc -ne "$code" ]; then
        fail "$what: exit $rc, want $code: $(cat "$T/stderr")"
    elif [ "$lines" != 1 ]; then
        fail "$what: $lines lines on stderr, want 1: $(cat "$T/stderr")"
    elif ! grep -q '^jattn: ' "$T/stderr"; then
        fail "$what: stderr does not start with 'jattn: ': $(cat "$T/stderr")"
    elif ! grep -qF -- "$needle" "$T/stderr"; then
        fail "$what: stderr lacks '$needle': $(cat "$T/stderr")"
    else
        pass
    fi
}

# json_keys WHAT FILE KEY...: every line of FILE is one JSON object holding every KEY.
json_keys() {
    what=$1 file=$2
    shift 2
    if [ ! -s "$file" ]; then
        fail "$what: no JSON output"
        return
    fi
    if [ $have_python = 1 ]; then
        if python3 - "$file" "$@" <<'EOF'; then pass; else fail "$what: JSON check failed: $(cat "$file")"; fi
import json, sys
path, keys = sys.argv[1], sys.argv[2:]
for line in open(path).read().splitlines():
    obj = json.loads(line)
    assert isinstance(obj, dict), "not an object"
    missing = [k for k in keys if k not in obj]
    assert not missing, "missing keys %s" % missing
EOF
    else
        ok=1
        for k in "$@"; do grep -qF "\"$k\":" "$file" || ok=0; done
        if [ $ok = 1 ] && [ "$(grep -c '^{.*}$' "$file")" = "$(wc -l <"$file" | tr -d ' ')" ]; then pass; else fail "$what: keys missing: $(cat "$file")"; fi
    fi
}

RUN_KEYS="backend kernel isa threads batch heads seq_q seq_kv dim precision ms gflops"
CHECK_KEYS="max_abs rel_l2 cos pass"

# ---- help, version ----
expect_ok "--help" "usage: jattn" "$J" --help
expect_ok "help" "usage: jattn" "$J" help
expect_ok "run --help" "usage: jattn" "$J" run --help
expect_ok "--version" "jattn 0." "$J" --version

# ---- backends: the library's list; every name it gives is a --backend choice, in rank order ----
expect_ok "backends" "auto runs the default job on" "$J" backends
"$J" backends --json >"$T/backends.json" 2>"$T/stderr"
json_keys "backends --json" "$T/backends.json" backend auto_rank is_gpu memory has_backward available kernel isa reason
names=$(sed -n 's/.*"backend":"\([a-z0-9_]*\)".*/\1/p' "$T/backends.json")
ranks=$(sed -n 's/.*"auto_rank":\([0-9]*\).*/\1/p' "$T/backends.json" | tr '\n' ' ')
want_ranks=$(i=0; for n in $names; do printf '%d ' $i; i=$((i + 1)); done)
if [ -n "$names" ] && [ "$ranks" = "$want_ranks" ]; then pass; else fail "backends --json: ranks '$ranks', want '$want_ranks'"; fi
for n in $names; do
    "$J" run --backend "$n" --heads 1 --seq 8 --dim 8 --reps 1 >"$T/stdout" 2>"$T/stderr"
    rc=$?
    if [ $rc = 0 ] || { [ $rc = 1 ] && grep -q "UNAVAILABLE" "$T/stderr"; }; then pass; else
        fail "run --backend $n (a name 'jattn backends' lists): exit $rc: $(cat "$T/stderr")"; fi
done
expect_error "backends takes no size" 2 "is not an option of 'backends'" "$J" backends --seq 8

# ---- run ----
expect_ok "run small, auto backend" "PASS" "$J" run --heads 2 --seq 40 --dim 32 --check
expect_ok "run small, ref backend" "PASS" "$J" run --backend ref --heads 3 --seq 17 --dim 16 --check
expect_ok "run cross-attention, batch 2, 1 thread" "PASS" "$J" run --batch 2 --heads 2 --seq 33 --seq-kv 65 --dim 64 \
    --threads 1 --scale 0.3 --check --reps 3
expect_ok "run --no-check" "not checked" "$J" run --heads 1 --seq 8 --dim 8 --no-check

"$J" run --json --heads 2 --seq 40 --dim 32 --check >"$T/run.json" 2>"$T/stderr"
rc=$?
if [ $rc -ne 0 ] || [ "$(wc -l <"$T/run.json" | tr -d ' ')" != 1 ]; then
    fail "run --json: exit $rc, want one line: $(cat "$T/run.json" "$T/stderr")"
else
    pass
    json_keys "run --json keys" "$T/run.json" $RUN_KEYS $CHECK_KEYS
    grep -qF '"pass":true' "$T/run.json" && pass || fail "run --json: not passing: $(cat "$T/run.json")"
fi

# The default job (what `make run` runs), one timed repeat: the FLUX.2 shape, checked.
"$J" run --check --json --reps 1 >"$T/default.json" 2>"$T/stderr"
rc=$?
if [ $rc -ne 0 ]; then
    fail "default job: exit $rc: $(cat "$T/stderr")"
else
    json_keys "default job keys" "$T/default.json" $RUN_KEYS $CHECK_KEYS
    for kv in '"batch":1' '"heads":24' '"seq_q":1536' '"seq_kv":1536' '"dim":128' '"precision":"f32"' '"pass":true'; do
        grep -qF "$kv" "$T/default.json" && pass || fail "default job: $kv missing: $(cat "$T/default.json")"
    done
fi

# ---- bench ----
"$J" bench --json --backend ref --heads 2 --seq 48 --dim 32 --threads 1,2 --reps 2 >"$T/bench.json" 2>"$T/stderr"
rc=$?
if [ $rc -ne 0 ] || [ "$(wc -l <"$T/bench.json" | tr -d ' ')" != 2 ]; then
    fail "bench --json: exit $rc, want 2 rows: $(cat "$T/bench.json" "$T/stderr")"
else
    pass
    json_keys "bench --json keys" "$T/bench.json" $RUN_KEYS $CHECK_KEYS fma_peak_gflops blas_gflops vs_blas
fi
expect_ok "bench table" "PASS" "$J" bench --backend ref --heads 2 --seq 48 --dim 32 --threads 1 --reps 2

# ---- .npy in and out ----
D=$T/npy
mkdir "$D"
gen() { "$J" gen --shape "$1" --seed "$2" --out "$3" || fail "gen $1 $3"; }
gen 2,5,8 1 "$D/q3.npy"
gen 2,7,8 2 "$D/k3.npy"
gen 2,7,8 3 "$D/v3.npy"
gen 2,3,9,16 4 "$D/q4.npy"
gen 2,3,12,16 5 "$D/k4.npy"
gen 2,3,12,16 6 "$D/v4.npy"
for n in 3 4; do
    expect_ok "run $n-d npy --out" "PASS" "$J" run --q "$D/q$n.npy" --k "$D/k$n.npy" --v "$D/v$n.npy" \
        --out "$D/out$n.npy" --lse "$D/lse$n.npy"
    expect_ok "run $n-d npy, ref --out" "PASS" "$J" run --backend ref --q "$D/q$n.npy" --k "$D/k$n.npy" \
        --v "$D/v$n.npy" --out "$D/ref$n.npy" --lse "$D/reflse$n.npy"
    expect_ok "compare $n-d out with ref" "PASS" "$J" compare "$D/out$n.npy" "$D/ref$n.npy"
    expect_ok "compare $n-d lse with ref" "PASS" "$J" compare "$D/lse$n.npy" "$D/reflse$n.npy"
done
# The header as numpy writes it (checked without python too).
head -c 128 "$D/out3.npy" | LC_ALL=C tr -c '[:print:]' '.' >"$T/head.txt"
grep -qF "NUMPY..v.{'descr': '<f4', 'fortran_order': False, 'shape': (5, 16), }" "$T/head.txt" && pass ||
    fail "out3.npy header: $(cat "$T/head.txt")"
head -c 128 "$D/out4.npy" | LC_ALL=C tr -c '[:print:]' '.' >"$T/head.txt"
grep -qF "'shape': (2, 9, 48), }" "$T/head.txt" && pass || fail "out4.npy header: $(cat "$T/head.txt")"

if [ $have_python = 1 ]; then
    for n in 3 4; do
        if python3 - "$D/q$n.npy" "$D/k$n.npy" "$D/v$n.npy" "$D/out$n.npy" "$D/lse$n.npy" <<'EOF'; then pass; else fail "python check of the $n-d output"; fi
# Independent reader and attention in plain Python (no numpy): header, layout and values.
import ast, math, struct, sys

def read_npy(path):
    b = open(path, "rb").read()
    assert b[:6] == b"\x93NUMPY", "magic"
    major = b[6]
    if major == 1:
        hl, off = struct.unpack("<H", b[8:10])[0], 10
    else:
        hl, off = struct.unpack("<I", b[8:12])[0], 12
    h = ast.literal_eval(b[off:off + hl].decode("latin1"))
    assert h["descr"] == "<f4" and h["fortran_order"] is False, h
    start = off + hl
    shape = h["shape"]
    n = 1
    for s in shape:
        n *= s
    assert len(b) - start == 4 * n, "data length"
    return shape, struct.unpack("<%df" % n, b[start:]), start

(qs, q, _), (ks, k, _), (vs, v, _) = (read_npy(p) for p in sys.argv[1:4])
os_, out, start = read_npy(sys.argv[4])
ls, lse, _ = read_npy(sys.argv[5])
assert start % 64 == 0, "data offset %d is not a multiple of 64" % start
four = len(qs) == 4
B = qs[0] if four else 1
H, Sq, D = qs[-3:]
Skv = ks[-2]
assert os_ == ((B, Sq, H * D) if four else (Sq, H * D)), os_
assert ls == ((B, H, Sq) if four else (H, Sq)), ls
scale = 1 / math.sqrt(D)
worst = 0.0
for b in range(B):
    for h in range(H):
        for i in range(Sq):
            qi = [q[((b * H + h) * Sq + i) * D + d] for d in range(D)]
            s = [scale * sum(qi[d] * k[((b * H + h) * Skv + j) * D + d] for d in range(D)) for j in range(Skv)]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            z = sum(e)
            for d in range(D):
                o = sum(e[j] * v[((b * H + h) * Skv + j) * D + d] for j in range(Skv)) / z
                got = out[((b * Sq + i) * H + h) * D + d]  # token-major [B, Sq, H, D]
                worst = max(worst, abs(got - o))
            worst = max(worst, abs(lse[(b * H + h) * Sq + i] - (m + math.log(z))) / max(1.0, abs(m + math.log(z))))
assert worst < 1e-5, "max error %g" % worst
EOF
    done
else
    echo "python3 absent: the output's values are checked by 'jattn compare' only"
fi

# ---- key padding: --kv-len and --key-mask ----
# mask_npy FILE SHAPE DESCR BYTE...: a .npy of bytes (octal escapes), the data at byte 128.
mask_npy() {
    file=$1 shape=$2 descr=$3
    shift 3
    dict="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
    pad=$((128 - 10 - ${#dict} - 1))
    printf '\223NUMPY\001\000\166\000%s%*s\n' "$dict" "$pad" "" >"$file"
    for b in "$@"; do printf "\\$b" >>"$file"; done
}
mask_npy "$D/mask12.npy" "(12,)" "|b1" 001 000 001 001 000 000 001 001 001 000 001 000
mask_npy "$D/mask2x12.npy" "(2, 12)" "|u1" 001 001 001 000 000 000 000 000 000 000 007 001 \
    000 000 000 000 000 000 000 000 000 000 000 000
mask_npy "$D/mask11.npy" "(11,)" "|b1" 001 001 001 001 001 001 001 001 001 001 001
mask_npy "$D/maskf4.npy" "(3,)" "<f4" 000 000 000 000 000 000 000 000 000 000 000 000
P4="--q $D/q4.npy --k $D/k4.npy --v $D/v4.npy"
expect_ok "run --kv-len, one length" "PASS" "$J" run $P4 --kv-len 5
expect_ok "run --kv-len per batch, lse" "PASS" "$J" run $P4 --kv-len 12,0 --lse "$D/lse_len.npy" --out "$D/out_len.npy"
expect_ok "run --key-mask [Skv]" "PASS" "$J" run $P4 --key-mask "$D/mask12.npy"
expect_ok "run --key-mask [B,Skv] with --kv-len" "PASS" "$J" run $P4 --key-mask "$D/mask2x12.npy" --kv-len 11 \
    --out "$D/out_mask.npy" --lse "$D/lse_mask.npy"
expect_ok "run --key-mask, ref backend" "PASS" "$J" run $P4 --backend ref --key-mask "$D/mask2x12.npy" --kv-len 11 \
    --out "$D/ref_mask.npy"
expect_ok "compare the masked output with ref" "PASS" "$J" compare "$D/out_mask.npy" "$D/ref_mask.npy"
"$J" run --json $P4 --key-mask "$D/mask12.npy" >"$T/mask.json" 2>"$T/stderr" && pass || fail "run --key-mask --json"
json_keys "run --key-mask --json keys" "$T/mask.json" $RUN_KEYS $CHECK_KEYS key_mask kv_len attended_keys
if [ $have_python = 1 ]; then
    if python3 - "$D/q4.npy" "$D/k4.npy" "$D/v4.npy" "$D/out_mask.npy" "$D/lse_mask.npy" "$D/mask2x12.npy" <<'EOF'; then pass; else fail "python check of the masked output"; fi
# The masked attention in plain Python: mask [2, 12] and kv_len 11; batch 1 attends nothing.
import ast, math, struct, sys

def read_npy(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    h = ast.literal_eval(b[10:10 + hl].decode("latin1"))
    n = 1
    for s in h["shape"]:
        n *= s
    fmt = "<%df" % n if h["descr"] == "<f4" else "%dB" % n
    return h["shape"], struct.unpack(fmt, b[10 + hl:])

(qs, q), (ks, k), (_, v), (_, out), (_, lse), (_, mask) = (read_npy(p) for p in sys.argv[1:7])
B, H, Sq, D = qs
Skv = ks[2]
worst = 0.0
for b in range(B):
    keys = [j for j in range(11) if mask[b * Skv + j]]
    for h in range(H):
        for i in range(Sq):
            row = [out[((b * Sq + i) * H + h) * D + d] for d in range(D)]
            l = lse[(b * H + h) * Sq + i]
            if not keys:
                assert all(x == 0.0 for x in row) and l == -math.inf, (b, h, i)
                continue
            qi = [q[((b * H + h) * Sq + i) * D + d] for d in range(D)]
            s = {j: sum(qi[d] * k[((b * H + h) * Skv + j) * D + d] for d in range(D)) / math.sqrt(D) for j in keys}
            m = max(s.values())
            e = {j: math.exp(x - m) for j, x in s.items()}
            z = sum(e.values())
            for d in range(D):
                ref = sum(e[j] * v[((b * H + h) * Skv + j) * D + d] for j in keys) / z
                worst = max(worst, abs(row[d] - ref))
            worst = max(worst, abs(l - (m + math.log(z))))
assert worst < 1e-5, "max error %g" % worst
EOF
fi
expect_error "--kv-len above seq_kv" 2 "--kv-len: 13 exceeds seq_kv 12" "$J" run $P4 --kv-len 13
expect_error "--kv-len count" 2 "--kv-len: 3 values for batch 2" "$J" run $P4 --kv-len 1,2,3
expect_error "--kv-len negative" 2 "--kv-len: -1 is out of range" "$J" run $P4 --kv-len -1
expect_error "--kv-len not a list" 2 "--kv-len: '4,,5' is not a comma-separated list" "$J" run $P4 --kv-len 4,,5
expect_error "--key-mask float32" 2 "neither bool ('|b1') nor uint8" "$J" run $P4 --key-mask "$D/maskf4.npy"
expect_error "--key-mask wrong length" 2 "--key-mask $D/mask11.npy: shape (11,) is neither" "$J" run $P4 --key-mask "$D/mask11.npy"
expect_error "--key-mask missing file" 2 "--key-mask $D/none.npy: cannot open" "$J" run $P4 --key-mask "$D/none.npy"
head -c 135 "$D/mask12.npy" >"$D/mask_short.npy"
expect_error "--key-mask truncated" 2 "data truncated" "$J" run $P4 --key-mask "$D/mask_short.npy"

# ---- error exits ----
expect_error "no command" 2 "missing command" "$J"
expect_error "unknown command" 2 "unknown command 'frobnicate'" "$J" frobnicate
expect_error "unknown option" 2 "unknown option '--frobnicate'" "$J" run --frobnicate
expect_error "option of another command" 2 "--q is not an option of 'bench'" "$J" bench --q "$D/q3.npy"
expect_error "bad number" 2 "--seq: '12x' is not an integer" "$J" run --seq 12x
expect_error "negative number" 2 "--heads: -3 is out of range" "$J" run --heads -3
expect_error "number too large" 2 "--dim: 99999999999999999999 is out of range" "$J" run --dim 99999999999999999999
expect_error "missing value" 2 "--seq: missing value" "$J" run --seq
expect_error "bad backend" 2 "--backend: 'gpu' is not one of" "$J" run --backend gpu
expect_error "bad scale" 2 "--scale: 'x' is not a number" "$J" run --scale x
expect_error "threads list for run" 2 "run takes one thread count" "$J" run --threads 1,2
expect_error "unexpected argument" 2 "unexpected argument 'foo'" "$J" run foo
expect_error "q without k, v" 2 "--q, --k and --v go together" "$J" run --q "$D/q3.npy"
expect_error "problem overflows" 2 "overflow" "$J" run --heads 10000000 --seq 10000000000000
expect_error "unsupported combination" 2 "JATTN_ERROR_UNSUPPORTED" "$J" run --backend ref --precision tf32 --seq 8
expect_error "missing file" 2 "--q $D/none.npy: cannot open" "$J" run --q "$D/none.npy" --k "$D/k3.npy" --v "$D/v3.npy"
expect_error "directory as input" 2 "is a directory" "$J" run --q "$D" --k "$D/k3.npy" --v "$D/v3.npy"
printf 'PK\003\004 this is a zip file, not a .npy' >"$D/zip.npy"
expect_error "bad magic" 2 "--q $D/zip.npy: not a .npy file" "$J" run --q "$D/zip.npy" --k "$D/k3.npy" --v "$D/v3.npy"
printf "\223NUMPY\001\000\105\000{'descr': '<f8', 'fortran_order': False, 'shape': (2, 7, 8), }      \n" >"$D/f8.npy"
expect_error "float64 .npy" 2 "dtype '<f8' is not little-endian float32" "$J" run --q "$D/q3.npy" --k "$D/f8.npy" --v "$D/v3.npy"
head -c 300 "$D/v3.npy" >"$D/short.npy"
expect_error "truncated .npy" 2 "--v $D/short.npy: data truncated" "$J" run --q "$D/q3.npy" --k "$D/k3.npy" --v "$D/short.npy"
cat "$D/v3.npy" "$D/v3.npy" >"$D/long.npy"
expect_error "trailing bytes" 2 "trailing bytes" "$J" run --q "$D/q3.npy" --k "$D/k3.npy" --v "$D/long.npy"
gen 5,8 7 "$D/two_d.npy"
expect_error "2-d input" 2 "has 2 dimensions; expected [H,S,D] or [B,H,S,D]" "$J" run --q "$D/two_d.npy" --k "$D/k3.npy" --v "$D/v3.npy"
gen 2,0,8 7 "$D/empty.npy"
expect_error "zero extent" 2 "has a zero dimension" "$J" run --q "$D/empty.npy" --k "$D/k3.npy" --v "$D/v3.npy"
gen 2,7,4 8 "$D/k_d4.npy"
expect_error "head_dim mismatch" 2 "head_dim 4 differs" "$J" run --q "$D/q3.npy" --k "$D/k_d4.npy" --v "$D/v3.npy"
gen 3,7,8 8 "$D/k_h3.npy"
expect_error "heads mismatch" 2 "heads 3 differs" "$J" run --q "$D/q3.npy" --k "$D/k_h3.npy" --v "$D/v3.npy"
gen 2,6,8 8 "$D/v_s6.npy"
expect_error "seq of k and v differ" 2 "seq 6 differs from --k" "$J" run --q "$D/q3.npy" --k "$D/k3.npy" --v "$D/v_s6.npy"
expect_error "3-d q with 4-d k" 2 "4 dimensions but --q" "$J" run --q "$D/q3.npy" --k "$D/k4.npy" --v "$D/v4.npy"
expect_error "size option disagrees" 2 "--seq 6 disagrees with the --q file (5)" "$J" run --q "$D/q3.npy" --k "$D/k3.npy" --v "$D/v3.npy" --seq 6
expect_error "compare shapes differ" 2 "shapes differ" "$J" compare "$D/out3.npy" "$D/out4.npy"
expect_error "compare outside the gate" 1 "outside the f32 gate" "$J" compare "$D/k3.npy" "$D/v3.npy"
"$J" run --backend cuda --heads 1 --seq 8 --dim 8 >"$T/stdout" 2>"$T/stderr"
rc=$?
if [ $rc -eq 1 ]; then
    [ "$(wc -l <"$T/stderr" | tr -d ' ')" = 1 ] && pass || fail "cuda absent: want one stderr line: $(cat "$T/stderr")"
elif [ $rc -ne 0 ]; then
    fail "--backend cuda: exit $rc, want 0 (present) or 1 (absent)"
fi

# The backward: timed, dq, dk, dv checked against the float64 ref backward (text and JSON);
# bench --backward with and without a Python that has torch; the usage it refuses.
"$J" run --backward --heads 2 --seq 70 --seq-kv 50 --dim 32 --threads 2 --reps 2 >"$T/bwd.txt" 2>"$T/stderr"
rc=$?
[ $rc -eq 0 ] && grep -q "^parity   PASS" "$T/bwd.txt" && grep -q "dk rel_l2" "$T/bwd.txt" && pass ||
    fail "run --backward: exit $rc, $(cat "$T/bwd.txt" "$T/stderr")"
"$J" run --backward --batch 2 --heads 3 --seq 33 --dim 16 --json --reps 1 >"$T/bwd.json" 2>"$T/stderr"
rc=$?
[ $rc -eq 0 ] && grep -q '"pass_kind":"backward"' "$T/bwd.json" && grep -q '"pass":true' "$T/bwd.json" &&
    grep -q '"dv_rel_l2":' "$T/bwd.json" && [ "$(wc -l <"$T/bwd.json" | tr -d ' ')" = 1 ] && pass ||
    fail "run --backward --json: exit $rc, $(cat "$T/bwd.json" "$T/stderr")"
"$J" run --backward --backend ref --heads 1 --seq 9 --dim 8 --reps 1 >"$T/bwd_ref.txt" 2>&1 &&
    grep -q "ref_attention_backward" "$T/bwd_ref.txt" && pass || fail "run --backward --backend ref: $(cat "$T/bwd_ref.txt")"
JATTN_BENCH_PYTHON=/nonexistent/python "$J" bench --backward --heads 1 --seq 64 --dim 32 --threads 1 --reps 2 \
    >"$T/bbench.txt" 2>"$T/stderr"
rc=$?
[ $rc -eq 0 ] && grep -q "cpu_flash_bwd" "$T/bbench.txt" && grep -q " nan " "$T/bbench.txt" && pass ||
    fail "bench --backward without torch: exit $rc, $(cat "$T/bbench.txt" "$T/stderr")"
if [ -n "${JATTN_TEST_PYTHON:-}" ] && "$JATTN_TEST_PYTHON" -c "import torch" 2>/dev/null; then
    JATTN_BENCH_PYTHON=$JATTN_TEST_PYTHON "$J" bench --backward --heads 1 --seq 64 --dim 32 --threads 1 --reps 2 \
        --json >"$T/bbench.json" 2>"$T/stderr" && grep -q '"torch_ms":[0-9]' "$T/bbench.json" && pass ||
        fail "bench --backward beside torch: $(cat "$T/bbench.json" "$T/stderr")"
fi
expect_error "--backward with --kv-len" 2 "--backward runs on synthetic inputs" "$J" run --backward --kv-len 3
expect_error "--backward is no compare option" 2 "--backward is not an option of 'compare'" \
    "$J" compare --backward "$D/out3.npy" "$D/out3.npy"

# ---- grouped-query heads, masks and zero sizes ----
# Each mask option (and all together) on the reference and auto backends, checked against the
# reference with the same mask; the FLOPs are 4*D per attended pair, so the JSON's attended_pairs
# is checked against the count written out by hand.
expect_ok "run --help documents the masks" "--kv-heads N" "$J" run --help
for opt in "--causal[=top-left|bottom-right]" "--blocks N" "--segments L1,L2" "--segments-kv K1" \
    "--key-bias[=batch|head|shared]" "may be 0"; do
    grep -qF -- "$opt" "$T/stdout" && pass || fail "run --help lacks '$opt'"
done
# pairs WHAT WANT CMD...: run --json, exit 0, passing, "attended_pairs":WANT.
pairs() {
    what=$1 want=$2
    shift 2
    "$@" --json >"$T/mask.json" 2>"$T/stderr"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$what: exit $rc: $(cat "$T/stderr")"
    elif ! grep -qF '"pass":true' "$T/mask.json"; then
        fail "$what: not passing: $(cat "$T/mask.json")"
    elif ! grep -qF "\"attended_pairs\":$want," "$T/mask.json"; then
        fail "$what: attended_pairs is not $want: $(cat "$T/mask.json")"
    else
        pass
    fi
}
M="--heads 2 --dim 16 --reps 1"
# shellcheck disable=SC2086
{
    pairs "causal top-left, Sq = Skv = 40: 2 x 40*41/2" 1640 "$J" run $M --seq 40 --causal
    pairs "causal bottom-right, Sq 4, Skv 10: 2 x (7+8+9+10)" 68 "$J" run $M --seq 4 --seq-kv 10 --causal=bottom-right
    pairs "causal top-left, Sq 4, Skv 10: 2 x (1+2+3+4)" 20 "$J" run $M --seq 4 --seq-kv 10 --causal=top-left
    pairs "2 blocks over 8: 2 x (4*4 + 4*8)" 96 "$J" run $M --seq 8 --blocks 2
    pairs "segments 3,5: 2 x (9 + 25)" 68 "$J" run $M --segments 3,5
    pairs "segments 3,5 / kv 2,4, causal bottom-right: 2 x (3 + 10)" 26 "$J" run $M --segments 3,5 --segments-kv 2,4 \
        --causal=bottom-right
    pairs "segments past the queries' end: 2 x 4" 8 "$J" run $M --seq 6 --segments 2 --backend ref
    pairs "grouped-query heads, key padding: 4 x 9 x 7" 252 "$J" run --heads 4 --kv-heads 2 --dim 16 --seq 9 \
        --reps 1 --kv-len 7
}
for kv in 1 2 4; do
    expect_ok "run --kv-heads $kv of 4, causal" "PASS" "$J" run --batch 2 --heads 4 --kv-heads $kv --seq 33 \
        --seq-kv 21 --dim 32 --causal=bottom-right --reps 1 --lse "$D/lse_gqa.npy"
done
for bias in "" "=batch" "=head" "=shared"; do
    expect_ok "run --key-bias$bias" "PASS" "$J" run --batch 2 --heads 3 --seq 17 --seq-kv 29 --dim 16 \
        --key-bias$bias --reps 1
done
expect_ok "run every mask at once, ref" "PASS" "$J" run --backend ref --batch 2 --heads 4 --kv-heads 2 --seq 30 \
    --dim 16 --causal --blocks 3 --segments 10,12,8 --key-bias=head --kv-len 25,30 --reps 1 --lse "$D/lse_all.npy"
"$J" run --json --backend ref --heads 4 --kv-heads 2 --seq 12 --dim 8 --causal --blocks 2 --reps 1 \
    >"$T/gqa.json" 2>"$T/stderr" && pass || fail "run masked --json: $(cat "$T/stderr")"
json_keys "run masked --json keys" "$T/gqa.json" $RUN_KEYS $CHECK_KEYS kv_heads mask attended_pairs flops \
    checked_batches checked_heads
"$J" run --backward --heads 4 --kv-heads 2 --seq 24 --seq-kv 20 --dim 16 --causal=bottom-right --blocks 2 \
    --key-bias --reps 1 >"$T/bwd_mask.txt" 2>"$T/stderr"
rc=$?
[ $rc -eq 0 ] && grep -q "^parity   PASS against the float64 ref backward with the same mask" "$T/bwd_mask.txt" &&
    grep -q "10\*D\*attended pairs" "$T/bwd_mask.txt" && pass ||
    fail "run --backward with masks: exit $rc, $(cat "$T/bwd_mask.txt" "$T/stderr")"
"$J" run --backward --json --heads 2 --seq 16 --dim 8 --segments 6,10 --reps 1 >"$T/bwd_mask.json" 2>"$T/stderr"
rc=$?
[ $rc -eq 0 ] && grep -q '"attended_pairs":272,' "$T/bwd_mask.json" && grep -q '"pass":true' "$T/bwd_mask.json" &&
    pass || fail "run --backward --segments --json: exit $rc, $(cat "$T/bwd_mask.json" "$T/stderr")"
"$J" bench --json --backend ref --heads 4 --kv-heads 1 --seq 40 --dim 16 --threads 1 --reps 2 --causal --blocks 4 \
    --key-bias=shared >"$T/bench_mask.json" 2>"$T/stderr"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$T/bench_mask.json" | tr -d ' ')" = 1 ]; then
    json_keys "bench masked --json keys" "$T/bench_mask.json" $RUN_KEYS $CHECK_KEYS kv_heads mask flops
    grep -qF '"pass":true' "$T/bench_mask.json" && grep -qF '"blas_ms":null' "$T/bench_mask.json" && pass ||
        fail "bench masked: $(cat "$T/bench_mask.json")"
else
    fail "bench masked --json: exit $rc: $(cat "$T/bench_mask.json" "$T/stderr")"
fi
expect_ok "bench --backward, masked" "10*D per attended" "$J" bench --backward --backend ref --heads 2 --kv-heads 1 \
    --seq 32 --dim 16 --threads 1 --reps 1 --causal
# auto with a mask: the backend that serves it (today the reference: bench then asks for --backend ref)
"$J" bench --heads 2 --seq 32 --dim 16 --threads 1 --reps 1 --causal >"$T/stdout" 2>"$T/stderr"
rc=$?
if [ $rc = 0 ] || { [ $rc = 1 ] && grep -q "no optimised backend present (auto picks ref" "$T/stderr"; }; then pass; else
    fail "bench --causal on auto: exit $rc: $(cat "$T/stderr")"; fi
# Grouped-query heads from files: k and v with --kv-heads heads; the masked output checked in plain Python.
gen 4,5,8 11 "$D/q_g.npy"
gen 2,7,8 12 "$D/k_g.npy"
gen 2,7,8 13 "$D/v_g.npy"
expect_ok "run --kv-heads 2 from files, causal bottom-right" "PASS" "$J" run --q "$D/q_g.npy" --k "$D/k_g.npy" \
    --v "$D/v_g.npy" --kv-heads 2 --causal=bottom-right --out "$D/out_g.npy" --lse "$D/lse_g.npy"
expect_error "k files without --kv-heads" 2 "heads 2 differs" "$J" run --q "$D/q_g.npy" --k "$D/k_g.npy" \
    --v "$D/v_g.npy"
if [ $have_python = 1 ]; then
    if python3 - "$D/q_g.npy" "$D/k_g.npy" "$D/v_g.npy" "$D/out_g.npy" "$D/lse_g.npy" <<'EOF'; then pass; else fail "python check of the grouped-query causal output"; fi
# Query head h reads key/value head h // 2; query t attends keys u <= t + Skv - Sq (bottom-right).
import ast, math, struct, sys

def read_npy(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    h = ast.literal_eval(b[10:10 + hl].decode("latin1"))
    n = 1
    for s in h["shape"]:
        n *= s
    return h["shape"], struct.unpack("<%df" % n, b[10 + hl:])

(qs, q), (ks, k), (_, v), (os_, out), (_, lse) = (read_npy(p) for p in sys.argv[1:6])
H, Sq, D = qs
Hk, Skv, _ = ks
assert os_ == (Sq, H * D), os_
worst = 0.0
for h in range(H):
    g = h // (H // Hk)
    for i in range(Sq):
        keys = [j for j in range(Skv) if j <= i + Skv - Sq]
        qi = [q[(h * Sq + i) * D + d] for d in range(D)]
        s = {j: sum(qi[d] * k[(g * Skv + j) * D + d] for d in range(D)) / math.sqrt(D) for j in keys}
        m = max(s.values())
        e = {j: math.exp(x - m) for j, x in s.items()}
        z = sum(e.values())
        for d in range(D):
            ref = sum(e[j] * v[(g * Skv + j) * D + d] for j in keys) / z
            worst = max(worst, abs(out[(i * H + h) * D + d] - ref))
        worst = max(worst, abs(lse[h * Sq + i] - (m + math.log(z))))
assert worst < 1e-5, "max error %g" % worst
EOF
fi
# Zero sizes: PyTorch's answer. No key: out rows 0, lse -inf; no batch, head or query: empty outputs.
expect_ok "run --seq-kv 0" "PASS" "$J" run --heads 2 --seq 3 --seq-kv 0 --dim 8 --out "$D/out_z.npy" --lse "$D/lse_z.npy"
expect_ok "run --batch 0" "PASS" "$J" run --batch 0 --heads 2 --seq 3 --dim 8 --out "$D/out_b0.npy"
expect_ok "run --heads 0 --seq 0, masked" "PASS" "$J" run --heads 0 --seq 0 --dim 8 --causal --blocks 2
expect_ok "run --seq 0 --backward" "PASS" "$J" run --backward --heads 2 --seq 0 --seq-kv 5 --dim 8
expect_ok "bench --seq-kv 0" "PASS" "$J" bench --backend ref --heads 2 --seq 8 --seq-kv 0 --dim 8 --threads 1 --reps 1
head -c 128 "$D/out_b0.npy" | LC_ALL=C tr -c '[:print:]' '.' >"$T/head.txt"
grep -qF "'shape': (0, 3, 16), }" "$T/head.txt" && pass || fail "out_b0.npy header: $(cat "$T/head.txt")"
if [ $have_python = 1 ]; then
    python3 - "$D/out_z.npy" "$D/lse_z.npy" <<'EOF' && pass || fail "python check of the zero-key output"
import math, struct, sys
for path, want in ((sys.argv[1], 0.0), (sys.argv[2], -math.inf)):
    b = open(path, "rb").read()
    hl = struct.unpack("<H", b[8:10])[0]
    vals = struct.unpack("<%df" % ((len(b) - 10 - hl) // 4), b[10 + hl:])
    assert vals and all(x == want for x in vals), (path, vals[:4])
EOF
fi

# Outputs that cannot be written: exit 1, and no file at all is left behind.
O=$T/outdir
mkdir "$O"
expect_error "--out in a missing directory" 1 "--out $O/missing/o.npy: cannot create" \
    "$J" run --heads 1 --seq 8 --dim 8 --out "$O/missing/o.npy"
expect_error "--out is a directory" 1 "is a directory" "$J" run --heads 1 --seq 8 --dim 8 --out "$O"
expect_error "--lse unwritable, --out fine" 1 "--lse $O/missing/l.npy" \
    "$J" run --heads 1 --seq 8 --dim 8 --out "$O/o.npy" --lse "$O/missing/l.npy"
expect_error "--out unwritable, bad input first" 2 "not a .npy file" \
    "$J" run --q "$D/zip.npy" --k "$D/k3.npy" --v "$D/v3.npy" --out "$O/o.npy"
expect_error "gen into a missing directory" 1 "cannot create" "$J" gen --shape 2,2 --out "$O/missing/g.npy"
left=$(ls -A "$O")
[ -z "$left" ] && pass || fail "files left behind after failed writes: $left"

echo "test_cli: $passed passed, $failed failed"
[ $failed -eq 0 ]
