#!/usr/bin/env bash
# The pending GPU patches' first call in one command (from the repository root on the device, nothing carried):
#   bash lab/gpu/pending_run.sh
# applies lab/gpu/pending/*.patch in the order they stack (the parts sum, grouped heads on it, the float64
# small-head_dim kernel), each one that applies (git apply works without a repository; patch -p1 where git is
# missing), then runs lab/gpu/v1_small_head_dim_run.sh, which tests and times what is applied. Logs under $OUT
# (see that script).
set -u
for p in v4_dkv_parts_slices v4_gqa v1_small_head_dim_f64; do
  f=lab/gpu/pending/$p.patch
  if [ ! -f "$f" ]; then echo "NOT applied: $p (no file)"; continue; fi
  if command -v git > /dev/null 2>&1; then
    if git apply --check "$f" 2> /dev/null; then git apply "$f" && echo "applied $p"; else echo "NOT applied: $p"; fi
  elif patch -p1 --dry-run -s < "$f" > /dev/null 2>&1; then
    patch -p1 -s < "$f" && echo "applied $p"
  else
    echo "NOT applied: $p"
  fi
done
exec bash lab/gpu/v1_small_head_dim_run.sh
