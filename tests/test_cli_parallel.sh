#!/bin/sh
# End to end: `jattn run --parallel` under mpirun (arguments: the built jattn, then mpiexec and
# its flags; no mpiexec when jattn is built without MPI).
#
#  - ring, Ulysses and auto, on 1 to 4 ranks: uneven shards (S not divisible by P, --shards
#    with shards of one token), heads not divisible by P, cross-attention (k, v replicated
#    with --replicate-kv, or of another length and sharded): rank 0 prints the report of
#    `jattn run` with a "parallel" line and parity PASS against the float64 reference of the
#    whole problem; --json prints exactly one JSON object, from rank 0 only;
#  - errors: exit 2 and one "jattn: " line (from rank 0 only; mpirun may add its own) for bad
#    --shards, too few tokens, --parallel with file inputs; exit 1 for a missing GPU;
#  - built without MPI: --parallel exits 1 with one line saying so.
# shellcheck disable=SC2086 # $SMALL and $MPI are word lists
set -u
J=$1
shift
T=$(mktemp -d "${TMPDIR:-/tmp}/test_cli_parallel.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
SMALL="--heads 4 --dim 32 --threads 1 --reps 2" # options, split into words where used

if [ $# -eq 0 ]; then
    "$J" run --parallel ring --seq 16 $SMALL >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "built without MPI" "$T/err"; then pass; else
        fail "without MPI: exit $rc: $(cat "$T/err")"
    fi
    echo "test_cli_parallel: $passed passed, $failed failed (jattn built without MPI)"
    [ $failed -eq 0 ]
    exit
fi

# check_report WHAT NP ARGS...: exit 0, one report from rank 0 with its parallel line, parity PASS.
check_report() {
    what=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    $MPI -np "$np" "$J" run --check "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$what: exit $rc: $(grep '^jattn' "$T/err")"
    elif [ "$(grep -c '^parity' "$T/out")" -ne 1 ] || ! grep -q '^parity .*: PASS (f32 gate)' "$T/out"; then
        fail "$what: no single PASS line: $(cat "$T/out")"
    elif [ "$(grep -c '^jattn .* run: attention' "$T/out")" -ne 1 ] || ! grep -q "^parallel .* over $np rank" "$T/out"; then
        fail "$what: not one report of rank 0 with its parallel line: $(cat "$T/out")"
    else
        pass
    fi
}
MPI="$*"

check_report "ring, 2 ranks" 2 --parallel ring --seq 256 $SMALL
check_report "ulysses, 3 ranks, 5 heads, uneven shards" 3 --parallel ulysses --seq 100 --heads 5 --dim 32 --threads 1 --reps 2
check_report "auto, 4 ranks, shards of one token" 4 --parallel auto --seq 100 --shards 1,1,97,1 $SMALL
# JATTN_TEST_QUICK (the sanitizer runs): the cases above only
if [ -z "${JATTN_TEST_QUICK:-}" ]; then
    check_report "ring, 4 ranks, shards of one token" 4 --parallel ring --seq 100 --shards 1,97,1,1 --heads 3 --dim 16 --threads 1 --reps 2
    check_report "ring, replicated k, v" 2 --parallel ring --seq 64 --seq-kv 77 --replicate-kv $SMALL
    check_report "ulysses, replicated k, v" 3 --parallel ulysses --seq 64 --seq-kv 77 --replicate-kv $SMALL
    check_report "ring, k, v of another length, sharded" 3 --parallel ring --seq 64 --seq-kv 50 $SMALL
    check_report "ulysses, batch 2" 2 --parallel ulysses --seq 48 --batch 2 $SMALL
    check_report "one rank" 1 --parallel ring --seq 64 $SMALL
fi

# --json: one object on one line, from rank 0, with the parallel keys
$MPI -np 2 "$J" run --parallel ring --check --json --seq 128 $SMALL >"$T/out" 2>"$T/err" </dev/null
rc=$?
if [ $rc -ne 0 ] || [ "$(wc -l <"$T/out")" -ne 1 ]; then
    fail "--json: exit $rc, $(wc -l <"$T/out") lines: $(cat "$T/out")"
elif command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import json,sys; o=json.loads(open(sys.argv[1]).read()); sys.exit(0 if o["parallel"]=="ring" and o["ranks"]==2 and o["transport"]=="mpi" and o["pass"] is True and o["q_shards"]=="64,64" else 1)' "$T/out"; then
        pass
    else
        fail "--json: keys: $(cat "$T/out")"
    fi
elif grep -q '"parallel":"ring"' "$T/out" && grep -q '"pass":true' "$T/out"; then pass; else fail "--json: $(cat "$T/out")"; fi

# errors: the exit code, one line from jattn
expect_error() { # WHAT CODE NEEDLE NP ARGS...
    what=$1 code=$2 needle=$3 np=$4
    shift 4
    $MPI -np "$np" "$J" run "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    lines=$(grep -c '^jattn: ' "$T/err")
    if [ $rc -ne "$code" ] || [ "$lines" -ne 1 ] || ! grep -q -- "$needle" "$T/err"; then
        fail "$what: exit $rc (want $code), $lines jattn lines: $(cat "$T/err")"
    else
        pass
    fi
}
expect_error "--shards count" 2 "3 lengths for 2 ranks" 2 --parallel ring --seq 64 --shards 1,2,61 $SMALL
expect_error "--shards sum" 2 "sum to 3" 2 --parallel ring --seq 64 --shards 1,2 $SMALL
expect_error "too few tokens" 2 "cannot be shared by 3 ranks" 3 --parallel ring --seq 2 $SMALL
expect_error "tf32 on the cpu" 2 "exec.precision" 2 --parallel ulysses --seq 64 --precision tf32 $SMALL
if ! "$J" run --backend cuda --seq 8 --heads 1 --dim 8 >/dev/null 2>&1; then
    expect_error "--backend cuda without a GPU" 1 "cuda" 2 --parallel ring --seq 64 --backend cuda --heads 4 --dim 32
fi
"$J" run --parallel ring --q a.npy --k b.npy --v c.npy >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "synthetic inputs" "$T/err"; then pass; else
    fail "--parallel with files: exit $rc: $(cat "$T/err")"
fi
echo "test_cli_parallel: $passed passed, $failed failed"
[ $failed -eq 0 ]
