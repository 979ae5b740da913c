#!/bin/sh
# The jattn command under hostile input (issue 6). Argument: the built jattn.
#
# Every malformed input class -- bad .npy files (magic, version, truncation, header length,
# dtype, byte order, Fortran order, shapes huge, overflowing, negative, zero, of the wrong rank,
# trailing bytes, a broken header dict, a directory, a device), shapes that disagree between q,
# k and v, missing files, unwritable outputs, nonsense options and values, huge dimensions --
# must give: the documented exit code (2 bad usage or input, 1 runtime failure such as an
# unwritable output or memory), exactly one line on stderr, no crash (no exit code >= 128, no
# sanitizer report), and no output file left behind (the output directory holds exactly what
# it held before: no half-written or temporary file either).
#
# The .npy files are made here with printf and dd only (no python, no numpy).
set -u
J=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/test_cli_hostile.XXXXXX") || exit 1
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
fail() {
    failed=$((failed + 1))
    echo "FAIL $*"
}

# ---- .npy files made by hand -------------------------------------------------------------

# byte N: the byte of value N (0..255) on stdout.
byte() { printf "\\$(printf '%03o' "$1")"; }

# npy PATH DICT DATA_BYTES [MAJOR [HEADER_LEN]]: magic, version MAJOR.0, the header length
# (2 bytes for 1.0, 4 for 2.0 and 3.0), DICT padded with spaces and a newline so the data
# starts at a multiple of 64, then DATA_BYTES zero bytes (float32 0.0). HEADER_LEN, when
# given, is written as the length field as is (a lie: DICT is not padded to it).
npy() {
    path=$1 dict=$2 nbytes=$3 major=${4:-1}
    lenbytes=2
    [ "$major" != 1 ] && lenbytes=4
    pre=$((6 + 2 + lenbytes))
    len=$(((pre + ${#dict} + 1 + 63) / 64 * 64 - pre))
    [ $# -ge 5 ] && len=$5
    {
        printf '\223NUMPY'
        byte "$major"
        byte 0
        byte $((len & 255))
        byte $(((len >> 8) & 255))
        if [ $lenbytes = 4 ]; then
            byte $(((len >> 16) & 255))
            byte $(((len >> 24) & 255))
        fi
        printf '%s' "$dict"
        pad=$((len - ${#dict} - 1))
        [ $# -ge 5 ] && pad=0 # a header length that lies: no padding to match it
        while [ $pad -gt 0 ]; do
            printf ' '
            pad=$((pad - 1))
        done
        printf '\n'
        [ "$nbytes" -gt 0 ] && dd if=/dev/zero bs="$nbytes" count=1 2>/dev/null
    } >"$path"
}

# A dict with descr '<f4', C order, and the shape text given.
f4() { printf "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" "$1"; }

# A good input set: q [2,8,16], k and v [2,12,16] (H, S, D).
npy "$T/q.npy" "$(f4 '(2, 8, 16)')" $((2 * 8 * 16 * 4))
npy "$T/k.npy" "$(f4 '(2, 12, 16)')" $((2 * 12 * 16 * 4))
npy "$T/v.npy" "$(f4 '(2, 12, 16)')" $((2 * 12 * 16 * 4))

mkdir "$T/out"

# ---- the check -------------------------------------------------------------------------

# expect WHAT CODES CMD...: exit code one of CODES ("2", "1 2"), one line on stderr, no crash,
# nothing new in $T/out.
expect() {
    what=$1 codes=$2
    shift 2
    before=$(ls -A "$T/out")
    "$@" >"$T/stdout" 2>"$T/stderr.raw"
    rc=$?
    # Under ASan with allocator_may_return_null=1 a huge allocation returns NULL (the case
    # tested) after ASan's own warning line, which is not the command's output.
    grep -v 'WARNING: AddressSanitizer failed to allocate' "$T/stderr.raw" >"$T/stderr"
    lines=$(wc -l <"$T/stderr" | tr -d ' ')
    after=$(ls -A "$T/out")
    ok_code=0
    for c in $codes; do [ "$rc" = "$c" ] && ok_code=1; done
    if [ "$rc" -ge 128 ]; then
        fail "$what: crashed (exit $rc): $(head -c 600 "$T/stderr")"
    elif grep -qE 'Sanitizer|runtime error:' "$T/stderr"; then
        fail "$what: sanitizer report: $(head -c 600 "$T/stderr")"
    elif [ $ok_code = 0 ]; then
        fail "$what: exit $rc, want $codes: $(cat "$T/stderr")"
    elif [ "$lines" != 1 ] || [ "$(wc -c <"$T/stderr" | tr -d ' ')" -gt 400 ]; then
        fail "$what: $lines lines on stderr, want one short line: $(head -c 600 "$T/stderr")"
    elif [ "$before" != "$after" ]; then
        fail "$what: left files behind in the output directory: $after"
    else
        passed=$((passed + 1))
        [ -n "${JATTN_TEST_VERBOSE:-}" ] && echo "ok   $what: exit $rc: $(cat "$T/stderr")"
    fi
    rm -f "$T/out/o.npy" "$T/out/l.npy"
}

O="$T/out/o.npy"
L="$T/out/l.npy"
run_with() { # run_with Q K V [more options]: a run reading files, writing $O
    q=$1 k=$2 v=$3
    shift 3
    "$J" run --backend ref --q "$q" --k "$k" --v "$v" --out "$O" "$@"
}

# The good set works (so every failure below is the bad input's).
"$J" run --backend ref --q "$T/q.npy" --k "$T/k.npy" --v "$T/v.npy" --out "$O" --lse "$L" >"$T/stdout" 2>"$T/stderr"
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$O" ] || [ ! -s "$L" ]; then
    fail "the good input set: exit $rc, output written: $(ls "$T/out"): $(cat "$T/stderr")"
else
    passed=$((passed + 1))
fi
rm -f "$O" "$L"

# ---- bad .npy files (each used as q, then as v) ----------------------------------------
B="$T/bad"
mkdir "$B"
N=$((2 * 8 * 16 * 4))
{ printf '\223NUMPZ'; tail -c +7 "$T/q.npy"; } >"$B/magic.npy"
{ printf 'PK'; byte 3; byte 4; tail -c +5 "$T/q.npy"; } >"$B/zip_magic.npy"
: >"$B/empty.npy"
head -c 9 "$T/q.npy" >"$B/trunc_preamble.npy"
head -c 40 "$T/q.npy" >"$B/trunc_header.npy"
head -c $(($(wc -c <"$T/q.npy") - 3)) "$T/q.npy" >"$B/trunc_data.npy"
head -c 128 "$T/q.npy" >"$B/trunc_data_most.npy"
{ cat "$T/q.npy"; printf 'xyz'; } >"$B/trailing_bytes.npy"
npy "$B/version4.npy" "$(f4 '(2, 8, 16)')" $N 4
npy "$B/header_len_past_end.npy" "$(f4 '(2, 8, 16)')" 0 1 65535
npy "$B/header_len_zero.npy" "$(f4 '(2, 8, 16)')" $N 1 0
npy "$B/f8.npy" "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 8, 16), }" $((N * 2))
npy "$B/f2.npy" "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 8, 16), }" $((N / 2))
npy "$B/i4.npy" "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 8, 16), }" $N
npy "$B/big_endian.npy" "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 8, 16), }" $N
npy "$B/fortran.npy" "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 8, 16), }" $N
npy "$B/shape_huge.npy" "$(f4 '(99999999999, 99999999999, 16)')" $N
npy "$B/shape_overflow.npy" "$(f4 '(4611686018427387904, 4, 4)')" $N
npy "$B/shape_negative.npy" "$(f4 '(-2, 8, 16)')" $N
npy "$B/shape_zero.npy" "$(f4 '(0, 8, 16)')" 0
npy "$B/shape_2d.npy" "$(f4 '(16, 16)')" $N
npy "$B/shape_5d.npy" "$(f4 '(1, 1, 2, 8, 16)')" $N
npy "$B/shape_text.npy" "$(f4 "('2', 8, 16)")" $N
npy "$B/shape_more_data.npy" "$(f4 '(2, 8, 15)')" $N
npy "$B/missing_shape.npy" "{'descr': '<f4', 'fortran_order': False, }" $N
npy "$B/not_a_dict.npy" "hello world" $N
npy "$B/unterminated_dict.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 8, 16" $N
npy "$B/junk_after_dict.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 8, 16), } junk" $N
npy "$B/duplicate_key.npy" "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 8, 16), }" $N
npy "$B/v2_header_len_4g.npy" "$(f4 '(2, 8, 16)')" 0 2 4294967295
mkdir "$B/directory.npy"

for f in "$B"/*; do
    name=$(basename "$f")
    expect "bad .npy $name as --q" 2 run_with "$f" "$T/k.npy" "$T/v.npy"
    expect "bad .npy $name as --v" 2 run_with "$T/q.npy" "$T/k.npy" "$f"
done
[ -e /dev/null ] && expect "bad .npy /dev/null as --k" 2 run_with "$T/q.npy" /dev/null "$T/v.npy"

# ---- shapes that disagree --------------------------------------------------------------
S="$T/shapes"
mkdir "$S"
npy "$S/k_d8.npy" "$(f4 '(2, 12, 8)')" $((2 * 12 * 8 * 4))
npy "$S/v_s11.npy" "$(f4 '(2, 11, 16)')" $((2 * 11 * 16 * 4))
npy "$S/k_h3.npy" "$(f4 '(3, 12, 16)')" $((3 * 12 * 16 * 4))
npy "$S/k_4d.npy" "$(f4 '(1, 2, 12, 16)')" $((2 * 12 * 16 * 4))
npy "$S/q_b2.npy" "$(f4 '(2, 2, 8, 16)')" $((2 * 2 * 8 * 16 * 4))
npy "$S/k_b3.npy" "$(f4 '(3, 2, 12, 16)')" $((3 * 2 * 12 * 16 * 4))
npy "$S/v_b3.npy" "$(f4 '(3, 2, 12, 16)')" $((3 * 2 * 12 * 16 * 4))
expect "head_dim of k differs from q" 2 run_with "$T/q.npy" "$S/k_d8.npy" "$T/v.npy"
expect "seq of v differs from k" 2 run_with "$T/q.npy" "$T/k.npy" "$S/v_s11.npy"
expect "heads of k differ from q" 2 run_with "$T/q.npy" "$S/k_h3.npy" "$T/v.npy"
expect "k 4-d, q and v 3-d" 2 run_with "$T/q.npy" "$S/k_4d.npy" "$T/v.npy"
expect "batch of k and v differs from q" 2 run_with "$S/q_b2.npy" "$S/k_b3.npy" "$S/v_b3.npy"
expect "size option disagrees with the files" 2 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --dim 32

# ---- missing files ---------------------------------------------------------------------
expect "missing --q file" 2 run_with "$T/nonexistent.npy" "$T/k.npy" "$T/v.npy"
expect "missing --v file" 2 run_with "$T/q.npy" "$T/k.npy" "$T/no/such/dir/v.npy"
expect "--q and --k without --v" 2 "$J" run --q "$T/q.npy" --k "$T/k.npy" --out "$O"

# ---- unwritable outputs (runtime failure: exit 1, decided before any work) -------------
: >"$T/plain_file"
expect "--out in a missing directory" 1 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --out "$T/out/missing/o.npy"
expect "--out under a regular file" 1 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --out "$T/plain_file/o.npy"
expect "--out is a directory" 1 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --out "$T/out"
expect "--lse unwritable, --out writable: neither left" 1 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" \
    --lse "$T/plain_file/l.npy"
expect "--out and --lse the same file" 2 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --lse "$O"
if [ "$(id -u)" != 0 ]; then # root writes into read-only directories
    mkdir "$T/readonly"
    chmod 555 "$T/readonly"
    expect "--out in a read-only directory" 1 run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" --out "$T/readonly/o.npy"
fi

# ---- nonsense options and values -------------------------------------------------------
small="--backend ref --heads 1 --seq 4 --dim 8 --no-check --reps 1"
# shellcheck disable=SC2086
{
    expect "no command" 2 "$J"
    expect "unknown command" 2 "$J" frobnicate
    expect "unknown option" 2 "$J" run --frobnicate 3
    expect "option of another command" 2 "$J" compare --seq 4 a.npy b.npy
    expect "option without its value" 2 "$J" run --seq
    expect "stray argument" 2 "$J" run extra
    expect "--seq abc" 2 "$J" run $small --seq abc
    expect "--seq -5" 2 "$J" run $small --seq -5
    expect "--dim 0" 2 "$J" run $small --dim 0
    expect "--seq 1e3" 2 "$J" run $small --seq 1e3
    expect "--seq empty" 2 "$J" run $small --seq ""
    expect "--seq 12x" 2 "$J" run $small --seq 12x
    expect "--seq 0x10" 2 "$J" run $small --seq 0x10
    expect "--backend gpu" 2 "$J" run $small --backend gpu
    expect "--precision f64" 2 "$J" run $small --precision f64
    expect "--threads -1" 2 "$J" run $small --threads -1
    expect "--threads 99999" 2 "$J" run $small --threads 99999
    expect "--threads 1,2 for run" 2 "$J" run $small --threads 1,2
    expect "--scale nan" 2 "$J" run $small --scale nan
    expect "--scale -1" 2 "$J" run $small --scale -1
    expect "--scale inf" 2 "$J" run $small --scale inf
    expect "--scale 1e39" 2 "$J" run $small --scale 1e39
    expect "--reps 0" 2 "$J" run $small --reps 0
    expect "--seed -1" 2 "$J" run $small --seed -1
    expect "--help with an argument" 2 "$J" --help extra
    expect "compare with one file" 2 "$J" compare "$T/q.npy"
    expect "gen without --shape" 2 "$J" gen --out "$O"
    expect "gen with a negative shape" 2 "$J" gen --shape 2,-1 --out "$O"
}

# ---- the mask options and grouped-query heads: refused with a message naming the option ----
# expect_named WHAT OPTION CMD...: exit 2, and the one stderr line names OPTION.
expect_named() {
    what=$1 option=$2
    shift 2
    expect "$what" 2 "$@"
    grep -qF -- "$option" "$T/stderr" || fail "$what: the message does not name $option: $(cat "$T/stderr")"
}
# shellcheck disable=SC2086
{
    expect_named "--kv-heads 0" --kv-heads "$J" run $small --kv-heads 0
    expect_named "--kv-heads -2" --kv-heads "$J" run $small --kv-heads -2
    expect_named "--kv-heads x" --kv-heads "$J" run $small --kv-heads x
    expect_named "--kv-heads beyond int64" --kv-heads "$J" run $small --kv-heads 99999999999999999999
    expect_named "--kv-heads not dividing --heads" --kv-heads "$J" run $small --heads 4 --kv-heads 3
    expect_named "--kv-heads above --heads" --kv-heads "$J" run $small --heads 2 --kv-heads 4
    expect_named "--kv-heads with zero heads" --kv-heads "$J" run $small --heads 0 --kv-heads 1
    expect_named "--kv-heads in bench" --kv-heads "$J" bench --backend ref --seq 4 --dim 8 --heads 6 --kv-heads 4
    expect_named "--kv-heads in run --backward" --kv-heads "$J" run --backward $small --heads 6 --kv-heads 5
    expect_named "--kv-heads with k files of other heads" --kv-heads run_with "$T/q.npy" "$T/k.npy" "$T/v.npy" \
        --kv-heads 1
    expect_named "--causal=sideways" --causal "$J" run $small --causal=sideways
    expect_named "--causal= (empty)" --causal "$J" run $small --causal=
    expect_named "--causal, value after a space" bottom-right "$J" run $small --causal bottom-right
    expect_named "--blocks 0" --blocks "$J" run $small --blocks 0
    expect_named "--blocks -1" --blocks "$J" run $small --blocks -1
    expect_named "--blocks 2^21" --blocks "$J" run $small --blocks 2097152
    expect_named "--blocks 1.5" --blocks "$J" run $small --blocks 1.5
    expect_named "--blocks without a value" --blocks "$J" run $small --blocks
    expect_named "--segments empty" --segments "$J" run $small --segments ""
    expect_named "--segments 1,,2" --segments "$J" run $small --segments 1,,2
    expect_named "--segments -1" --segments "$J" run $small --segments 2,-1
    expect_named "--segments 5,x" --segments "$J" run $small --segments 5,x
    expect_named "--segments 2^41" --segments "$J" run $small --segments 2199023255552
    expect_named "--segments of 257 lengths" --segments "$J" run $small \
        --segments "$(i=0; while [ $i -lt 257 ]; do printf '1,'; i=$((i + 1)); done)1"
    expect_named "--segments longer than --seq" --segments "$J" run $small --seq 4 --segments 3,2
    expect_named "--segments longer than --seq-kv" --segments "$J" run $small --seq 8 --seq-kv 4 --segments 3,2
    expect_named "--segments-kv longer than --seq-kv" --segments-kv "$J" run $small --seq 5 --seq-kv 4 \
        --segments 3,2 --segments-kv 4,1
    expect_named "--segments-kv without --segments" --segments-kv "$J" run $small --segments-kv 2,2
    expect_named "--segments-kv count" --segments-kv "$J" run $small --segments 2,2 --segments-kv 1,1,2
    expect_named "--segments in bench, past --seq" --segments "$J" bench --backend ref --dim 8 --seq 4 --segments 5
    expect_named "--key-bias=foo" --key-bias "$J" run $small --key-bias=foo
    expect_named "--key-bias= (empty)" --key-bias "$J" run $small --key-bias=
    expect_named "--parallel with --causal" --parallel "$J" run $small --parallel ring --causal
    expect_named "--parallel with --kv-heads" --parallel "$J" run $small --parallel ulysses --kv-heads 1
    expect_named "--parallel with a zero size" --parallel "$J" run --parallel ring --seq 0
    expect_named "--mask options of compare" --causal "$J" compare --causal a.npy b.npy
    expect_named "--causal of gen" --causal "$J" gen --shape 2 --out "$O" --causal
}
# A backend that does not serve a mask refuses it, naming it (exit 2), or serves it (exit 0).
"$J" run --backend cpu --heads 1 --seq 4 --dim 8 --reps 1 --causal >"$T/stdout" 2>"$T/stderr"
rc=$?
if [ $rc = 0 ] || { [ $rc = 2 ] && grep -q "does not serve causal" "$T/stderr"; }; then passed=$((passed + 1)); else
    fail "--backend cpu --causal: exit $rc: $(cat "$T/stderr")"; fi

# ---- huge dimensions (validation or memory: 2, or 1 for a failed allocation) -----------
expect "--seq 99999999999" "1 2" "$J" run --backend ref --heads 1 --dim 8 --seq 99999999999
expect "--seq 99999999999999999999 (not an int64)" 2 "$J" run --backend ref --seq 99999999999999999999
expect "--heads INT64_MAX" "1 2" "$J" run --backend ref --heads 9223372036854775807 --seq 2 --dim 2
expect "--batch and --heads whose product overflows" "1 2" "$J" run --backend ref --batch 4294967296 \
    --heads 4294967296 --seq 2 --dim 2
expect "--dim 2^40" "1 2" "$J" run --backend ref --heads 1 --seq 1 --dim 1099511627776
expect "gen --shape huge" "1 2" "$J" gen --shape 99999999999,99999999999 --out "$O"
expect "--segments summing past memory" "1 2" "$J" run --backend ref --heads 1 --dim 8 \
    --segments 1099511627776,1099511627776 --causal
expect "--key-bias over a huge problem" "1 2" "$J" run --backend ref --batch 99999999 --heads 99999 --seq 99999 \
    --dim 1 --key-bias=head
expect "--blocks 2^20 over a huge problem" "1 2" "$J" run --backend ref --heads 1 --seq 99999999999 --dim 8 \
    --blocks 1048576
expect "--kv-heads 1 over huge heads" "1 2" "$J" run --backend ref --heads 9223372036854775807 --kv-heads 1 \
    --seq 2 --dim 2

echo "test_cli_hostile: $passed passed, $failed failed"
[ $failed -eq 0 ]
