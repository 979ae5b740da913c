#!/bin/sh
# "No behaviour change" check of the cuda kernels without a GPU: the PTX of every .cu file of
# src/cuda (and src/parallel) in two source trees, compiled alike for each virtual architecture,
# compared file by file. A kernel whose PTX is the same computes the same bits.
#
# usage: sh bench/gpu/ptx_compare.sh TREE_BEFORE TREE_AFTER [ARCHS] [JOBS]
#   TREE_*  source trees (e.g. `git archive f87fba9 | tar -x -C /tmp/base`, and this checkout)
#   ARCHS   virtual architectures, default "compute_80 compute_90a"; JOBS default 2
#   NVCC    the compiler (default nvcc); OUT keeps the PTX (default a temporary folder); with
#           REUSE_BEFORE=1 the PTX of TREE_BEFORE already under OUT (OUT/A) is not compiled again
# The flags are the library's CUDA flags that reach device code (src/cuda/sources.cmake and the
# Release build: -std=c++17 -O3 -DNDEBUG, the definitions and include folders of jattn_objects).
# Prints one line per file and architecture: "same", "same entries" (the file differs, but every kernel
# of the before file is the same in the after one, found by name: ptx_entries.py; a change that added
# kernels, e.g. template instances beside the old ones), "DIFF", "only before" (removed), "only after"
# (new). Exit 0 when no kept file differs, 1 otherwise.
set -eu
A=$(cd "${1:?source tree before}" && pwd)
B=$(cd "${2:?source tree after}" && pwd)
ARCHS=${3:-compute_80 compute_90a}
JOBS=${4:-2}
NVCC=${NVCC:-nvcc}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ptx_compare.XXXXXX")}
mkdir -p "$OUT"
echo "PTX under $OUT ($($NVCC --version | tail -1))"

list() { (cd "$1" && ls src/cuda/*.cu src/parallel/*.cu 2>/dev/null) | sort; }
list "$A" >"$OUT/files.before"
list "$B" >"$OUT/files.after"
: >"$OUT/jobs"
for arch in $ARCHS; do
    comm -12 "$OUT/files.before" "$OUT/files.after" | while read -r f; do echo "$f $arch" >>"$OUT/jobs"; done
done
# Each tree is compiled from the same folder, $OUT/tree: nvcc names anonymous namespaces after the
# source's absolute path, so two folders would differ in every mangled name.
export OUT NVCC
for side in A B; do
    [ "$side" = A ] && tree=$A || tree=$B
    if [ "$side" = A ] && [ "${REUSE_BEFORE:-0}" = 1 ] && [ -d "$OUT/A" ]; then continue; fi
    rm -rf "$OUT/tree" "$OUT/$side"
    mkdir -p "$OUT/tree"
    cp -R "$tree/include" "$tree/src" "$OUT/tree/"
    # shellcheck disable=SC2016
    SIDE=$side xargs -P "$JOBS" -L 1 sh -c '
        f=$0 arch=$1
        dst=$OUT/$SIDE/$arch/$(echo "$f" | tr / _).ptx
        mkdir -p "$(dirname "$dst")"
        cd "$OUT/tree" && "$NVCC" -ptx -std=c++17 -O3 -DNDEBUG -DJATTN_BUILDING -D_POSIX_C_SOURCE=200809L \
            -I"$OUT/tree/include" -I"$OUT/tree/src" -arch="$arch" "$OUT/tree/$f" -o "$dst" ||
            echo "nvcc failed: $SIDE $f $arch" >&2
    ' <"$OUT/jobs"
done
rm -rf "$OUT/tree"

status=0
for arch in $ARCHS; do
    comm -12 "$OUT/files.before" "$OUT/files.after" | while read -r f; do
        name=$(echo "$f" | tr / _).ptx
        if [ -s "$OUT/A/$arch/$name" ] && cmp -s "$OUT/A/$arch/$name" "$OUT/B/$arch/$name"; then
            echo "same         $arch $f ($(wc -l <"$OUT/A/$arch/$name") lines)"
        elif [ -s "$OUT/A/$arch/$name" ] && python3 "$(dirname "$0")/ptx_entries.py" "$OUT/A/$arch/$name" \
            "$OUT/B/$arch/$name" >"$OUT/$arch.$name.entries" 2>&1; then
            echo "same entries $arch $f ($(tail -1 "$OUT/$arch.$name.entries"); kernels added)"
        else
            echo "DIFF         $arch $f"
        fi
    done
done | tee "$OUT/result"
comm -23 "$OUT/files.before" "$OUT/files.after" | sed 's/^/only before  /'
comm -13 "$OUT/files.before" "$OUT/files.after" | sed 's/^/only after   /'
grep -q "^DIFF" "$OUT/result" && status=1
echo "ptx_compare: $(grep -c '^same' "$OUT/result") same ($(grep -c '^same entries' "$OUT/result") entry by entry)," \
    "$(grep -c '^DIFF' "$OUT/result") different"
exit $status
