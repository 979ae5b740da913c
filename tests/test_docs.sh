#!/bin/sh
# The docs against the code (docs/DESIGN.md §3, README.md, python/README.md):
#   - every backend the library has (`jattn backends --json`, from jattn_backend_info_at) is named
#     in README.md, python/README.md and docs/DESIGN.md §3;
#   - the order the docs give for `auto` ("`auto` ... tries cuda, then ...") is the library's;
#   - every folder src/*/ stands in DESIGN §3's layer map;
#   - the backends ctest registered the per-backend suites for (read from src/backend.h by
#     cmake/backends.cmake, passed as arguments) are the library's, in its order;
#   - with --ladder: the kernel ladders of src/cuda/NOTES.md ("The kernel ladders": which cuda kernel
#     AUTO runs, forward and backward) are the code's (LADDER, tests/test_cuda_ladder.c, evaluates
#     the table and src/cuda/cuda_versions.c on a grid of calls);
#   - README.md's table of measured speed is what bench/readme_table.py generates from the results
#     files bench/results/readme_table.json names (skipped, saying so, where python3 is absent).
# Then the same checks run on copies of the docs with one backend name removed, with a folder
# added to src/, with the order changed, with a kernel of the ladder changed and with a figure of
# the README's table changed by hand: each must fail, so this test is known to catch them.
#
# usage: test_docs.sh [--ladder LADDER] JATTN SOURCE_DIR [REGISTERED_BACKEND...]
set -u
LADDER=
if [ "${1:-}" = --ladder ]; then
    LADDER=$2
    shift 2
fi
J=$1
SRC=$2
shift 2
REGISTERED=$*
T=$(mktemp -d "${TMPDIR:-/tmp}/jattn_docs.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

if ! "$J" backends --json >"$T/backends.json" 2>"$T/stderr"; then
    echo "FAIL jattn backends --json: $(cat "$T/stderr")"
    exit 1
fi
NAMES=$(sed -n 's/.*"backend":"\([a-z0-9_]*\)".*/\1/p' "$T/backends.json" | tr '\n' ' ' | sed 's/ $//')
if [ -z "$NAMES" ]; then
    echo "FAIL jattn backends --json listed no backend: $(cat "$T/backends.json")"
    exit 1
fi
echo "the library's backends, in auto's order: $NAMES"

# section3 FILE: the lines of docs/DESIGN.md's section 3 (from "## 3." to the next "## ").
section3() {
    awk '/^## 3\./ { on = 1; next } /^## / { on = 0 } on' "$1"
}

# auto_order FILE: the backends of the first "`auto` ... tries A, then B (remark), then C[.:;]"
# sentence of FILE, space-separated ("" when FILE has none).
auto_order() {
    tr '\n' ' ' <"$1" | sed 's/([^()]*)//g' |
        sed -n 's/.*`auto`[^.:;]*tries \([^.:;]*\).*/\1/p' | head -n 1 |
        sed 's/,/ /g; s/ then / /g; s/^then //' | tr -s ' ' | sed 's/^ //; s/ $//'
}

# check ROOT: every check on the docs and src/ folders under ROOT; prints one line per miss.
# @return the number of misses (0: all pass).
check() {
    root=$1
    misses=0
    section3 "$root/docs/DESIGN.md" >"$T/section3.md"
    if [ ! -s "$T/section3.md" ]; then
        echo "  miss: docs/DESIGN.md has no section 3"
        misses=$((misses + 1))
    fi
    for name in $NAMES; do
        for doc in README.md python/README.md "docs/DESIGN.md §3"; do
            file=$root/$doc
            [ "$doc" = "docs/DESIGN.md §3" ] && file=$T/section3.md
            if ! grep -qw -- "$name" "$file"; then
                echo "  miss: $doc does not name the backend $name"
                misses=$((misses + 1))
            fi
        done
    done
    for dir in "$root"/src/*/; do
        folder=src/$(basename "$dir")/
        if ! grep -q "^    $folder " "$T/section3.md"; then
            echo "  miss: docs/DESIGN.md §3's layer map has no line for $folder"
            misses=$((misses + 1))
        fi
    done
    for doc in README.md docs/DESIGN.md; do
        order=$(auto_order "$root/$doc")
        if [ "$order" != "$NAMES" ]; then
            echo "  miss: $doc says auto tries '$order'; the library's order is '$NAMES'"
            misses=$((misses + 1))
        fi
    done
    return $misses
}

failed=0
echo "the repository's docs:"
if check "$SRC"; then echo "  every check passes"; else failed=1; fi
if [ -n "$REGISTERED" ] && [ "$REGISTERED" != "$NAMES" ]; then
    echo "  miss: ctest registered the per-backend suites for '$REGISTERED' (cmake/backends.cmake), the library has '$NAMES'"
    failed=1
fi

if [ -n "$LADDER" ]; then
    echo "the kernel ladders of src/cuda/NOTES.md against the code:"
    if "$LADDER" "$SRC/src/cuda/NOTES.md" >"$T/ladder.out" 2>&1; then
        echo "  $(tail -n 2 "$T/ladder.out" | head -n 1)"
    else
        sed 's/^/  /' "$T/ladder.out" | head -n 30
        failed=1
    fi
fi

# The README's table of measured speed: bench/readme_table.py's output, from bench/results/.
PYTHON=$(command -v python3 || true)
if [ -n "$PYTHON" ]; then
    echo "README.md's table of measured speed against bench/results/ (bench/readme_table.py):"
    if "$PYTHON" "$SRC/bench/readme_table.py" --check "$SRC/README.md" >"$T/table.out" 2>&1; then
        echo "  $(tail -n 1 "$T/table.out")"
    else
        sed 's/^/  /' "$T/table.out" | head -n 40
        failed=1
    fi
else
    echo "README.md's table of measured speed: skipped (no python3 to run bench/readme_table.py)"
fi

# The checks must catch what they look for: a copy of the docs and of src/'s folders, changed.
copy() {
    rm -rf "$T/copy"
    mkdir -p "$T/copy/docs" "$T/copy/python" "$T/copy/src"
    cp "$SRC/README.md" "$T/copy/"
    cp "$SRC/python/README.md" "$T/copy/python/"
    cp "$SRC/docs/DESIGN.md" "$T/copy/docs/"
    for dir in "$SRC"/src/*/; do mkdir "$T/copy/src/$(basename "$dir")"; done
}
last=${NAMES##* }
first=${NAMES%% *}
expect_miss() {
    what=$1
    if check "$T/copy" >"$T/check.out"; then
        echo "FAIL the check does not notice $what"
        failed=1
    else
        echo "the check notices $what: $(head -n 1 "$T/check.out" | sed 's/^ *//')"
    fi
}
copy
sed "s/$last/xx/g" "$SRC/python/README.md" >"$T/copy/python/README.md"
expect_miss "python/README.md without the backend $last"
copy
mkdir "$T/copy/src/zz_new_backend"
expect_miss "a folder src/ has and the layer map lacks"
copy
sed "s/tries $first, then/tries nothing, then/" "$SRC/docs/DESIGN.md" >"$T/copy/docs/DESIGN.md"
expect_miss "another order for auto in docs/DESIGN.md"

if [ -n "$PYTHON" ]; then
    sed '/readme-table: begin/,/readme-table: end/ s/| [0-9.]*x |/| 9.99x |/' "$SRC/README.md" >"$T/README.md"
    if cmp -s "$T/README.md" "$SRC/README.md"; then
        echo "FAIL no ratio was found to change in README.md's table"
        failed=1
    elif "$PYTHON" "$SRC/bench/readme_table.py" --check "$T/README.md" >"$T/table.out" 2>&1; then
        echo "FAIL the check does not notice a figure of README.md's table changed by hand"
        failed=1
    else
        echo "the check notices a figure of README.md's table changed by hand: $(head -n 1 "$T/table.out" | cut -c1-100)"
    fi
fi

if [ -n "$LADDER" ]; then
    sed 's/^\(| forward | any | any | any | seq_kv 1 |.*\)| v1 |$/\1| v7 |/' \
        "$SRC/src/cuda/NOTES.md" >"$T/NOTES.md"
    if cmp -s "$T/NOTES.md" "$SRC/src/cuda/NOTES.md"; then
        echo "FAIL the ladder's single-key row was not found to change"
        failed=1
    elif "$LADDER" "$T/NOTES.md" >"$T/ladder.out" 2>&1; then
        echo "FAIL the check does not notice a ladder that names another kernel for a single key"
        failed=1
    else
        echo "the check notices a ladder that names another kernel for a single key: $(grep -m 1 FAIL "$T/ladder.out" | cut -c1-120)"
    fi
fi

if [ $failed = 0 ]; then echo "test_docs: PASS"; else echo "test_docs: FAIL"; fi
exit $failed
