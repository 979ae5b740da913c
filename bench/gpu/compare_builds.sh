#!/bin/sh
# Bitwise A/B of two builds of the jattn command on the GPU: every cuda kernel version (forced
# through JATTN_CUDA_KERNEL), both precisions, a few shapes (D 128, 64 and 40, cross-attention,
# key padding): the output and lse of A must be bit for bit those of B on the same inputs
# (--seed), and the selected kernel the same. For changes that move code without touching
# arithmetic (e.g. the refactor of the launch path), run against a build of the commit before.
#   sh bench/gpu/compare_builds.sh build/tools/jattn /path/to/other/build/tools/jattn
# VERSIONS: the versions (default "auto 1 6 7": AUTO's choice, then each kept version forced).
# Exit status 0 when every case is identical (the same bits, or the same refusal by both).
A=${1:?usage: compare_builds.sh JATTN_A JATTN_B}; B=${2:?usage: compare_builds.sh JATTN_A JATTN_B}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0; n=0
for v in ${VERSIONS:-auto 1 6 7}; do
  for prec in f32 tf32; do
    for shape in "--heads 4 --seq 1536 --dim 128" "--heads 3 --seq 333 --seq-kv 517 --dim 64" \
                 "--batch 2 --heads 2 --seq 200 --dim 128 --kv-len 150,77" "--heads 2 --seq 64 --dim 40"; do
      for side in A B; do
        eval bin=\$$side
        # shellcheck disable=SC2086
        JATTN_CUDA_KERNEL=$([ "$v" = auto ] || echo "v$v") "$bin" run --backend cuda --precision $prec $shape --seed 7 --reps 1 --no-check \
          --json --out "$T/o_$side.npy" --lse "$T/l_$side.npy" > "$T/r_$side.json" 2>&1
      done
      n=$((n + 1))
      ka=$(grep -o '"kernel": *"[^"]*"' "$T/r_A.json"); kb=$(grep -o '"kernel": *"[^"]*"' "$T/r_B.json")
      ra=$(grep -o 'JATTN_ERROR_[A-Z_]*' "$T/r_A.json" | head -1); rb=$(grep -o 'JATTN_ERROR_[A-Z_]*' "$T/r_B.json" | head -1)
      if [ -n "$ka" ] && [ "$ka" = "$kb" ] && cmp -s "$T/o_A.npy" "$T/o_B.npy" && cmp -s "$T/l_A.npy" "$T/l_B.npy"; then
        echo "same  v$v $prec [$shape] $ka"
      elif [ -z "$ka" ] && [ -z "$kb" ] && [ -n "$ra" ] && [ "$ra" = "$rb" ]; then
        echo "same  v$v $prec [$shape] refused by both: $ra"
      else
        echo "DIFF  v$v $prec [$shape] A: $ka B: $kb"; head -c 300 "$T/r_A.json"; echo; head -c 300 "$T/r_B.json"; echo
        fail=1
      fi
    done
  done
done
echo "compare_builds: $n cases, $([ $fail = 0 ] && echo 'all identical' || echo 'DIFFERENCES')"
exit $fail
