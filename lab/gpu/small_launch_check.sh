#!/usr/bin/env bash
# A pending patch (default lab/gpu/pending/v4_epilogue_pdl.patch: the v4 epilogue in one grid and programmatic
# launches of v4 and v6; PATCH=file for another) checked against the tree without it, from the repository root on
# the device (2026-12-07 it ran with the backward v4 with windows in the same patch, since landed:
# bench/results/h100-2026-12-07-windows/):
#   bash lab/gpu/small_launch_check.sh build windows masks   (call 1)
#   bash lab/gpu/small_launch_check.sh fwdtests sanitize     (call 2, the machine still warm: the builds stay in build-*/)
#   bash lab/gpu/small_launch_check.sh basebuild time        (call 3: beside the tree without the patch)
# The variant's tree is build-variant/tree (ignored), its build build-variant/tree/build-pending; the baseline's
# build build-base. Logs under $OUT (default /tmp/small).
set -u
SECONDS=0
OUT=${OUT:-/tmp/small}
mkdir -p "$OUT"
V=build-variant/tree
R=$PWD

stage_build() {
  rm -rf build-variant && mkdir -p $V
  tar cf - --exclude='./build*' --exclude=./.carry --exclude=./.git . | tar xf - -C $V
  (cd $V && patch -p1 -s < "${PATCH:-lab/gpu/pending/v4_epilogue_pdl.patch}") || { echo "patch failed"; exit 1; }
  (cd $V && OUT=$OUT/var bash lab/gpu/pending_check.sh build)
  echo "build done after $SECONDS s"
}
stage_basebuild() { # the tree without the patch: the library and the command, for the times
  cmake -S . -B build-base -DCMAKE_BUILD_TYPE=Release -DJATTN_CUDA=ON -DJATTN_CUDA_ARCHS=90a -DJATTN_MPI=OFF \
    -DJATTN_NCCL=OFF -DJATTN_VULKAN=OFF > "$OUT/build-base.txt" 2>&1 &&
    cmake --build build-base -j "$(nproc)" --target jattn_shared jattn >> "$OUT/build-base.txt" 2>&1 || echo "base build failed"
  echo "base build done after $SECONDS s"
}
stage_windows() { (cd $V && OUT=$OUT/var-win bash lab/gpu/pending_check.sh windows); }
stage_sanitize() { (cd $V && OUT=$OUT/var-san bash lab/gpu/pending_check.sh sanitize); }
stage_masks() { (cd $V && OUT=$OUT/var-masks bash lab/gpu/pending_check.sh masks); }
stage_fwdtests() { # the forward suites (v6 under AUTO), v1 forced, the head_dim-1 chain, on the variant
  local T=$V/build-pending/tests L=$OUT/fwd
  mkdir -p $L
  (timeout 280 $T/test_masks cuda all > $L/masks.txt 2>&1; echo "rc $?" >> $L/masks.txt) &
  (timeout 280 $T/test_edges cuda > $L/edges.txt 2>&1; echo "rc $?" >> $L/edges.txt) &
  (timeout 280 $T/test_parity cuda > $L/parity.txt 2>&1; echo "rc $?" >> $L/parity.txt) &
  (timeout 280 $T/test_cuda_device > $L/device.txt 2>&1; echo "rc $?" >> $L/device.txt) &
  (JATTN_CUDA_KERNEL=1 timeout 280 $T/test_cuda_kernels forward > $L/v1.txt 2>&1; echo "rc $?" >> $L/v1.txt) &
  wait
  for i in 1 2 3; do timeout 60 $T/test_backward cuda chain > $L/chain-$i.txt 2>&1; echo "rc $?" >> $L/chain-$i.txt; done
  echo "== fwdtests (after $SECONDS s)"
  for f in $L/*.txt; do echo "$(basename $f): $(grep -E "passed|PASS|FAIL" $f | tail -1 | cut -c1-120) | $(tail -1 $f)"; done
  grep -h "^FAIL" $L/*.txt | head -8
}

stage_sweep() { # the masked backward on fresh seeds, v4 forced, two sweeps at once (the device shared)
  local T=$V/build-pending/tests L=$OUT/sweep
  mkdir -p $L
  (JATTN_CUDA_BWD_KERNEL=4 timeout 280 bash bench/cpu/seed_sweep.sh ${N:-12} $T/test_backward cuda masks > $L/bwd-masks.txt 2>&1) &
  (JATTN_CUDA_BWD_KERNEL=4 timeout 280 bash bench/cpu/seed_sweep.sh ${N:-12} $T/test_cuda_kernels masks > $L/kernels-masks.txt 2>&1) &
  wait
  echo "== sweep (after $SECONDS s)"; tail -n 3 $L/*.txt
}

stage_split() { # the masked calls' kernels beside the calls they should match (lab/gpu/mask_kernel_split.py)
  . lab/gpu/package_from_build.sh
  package_from_build $V/build-pending /tmp/pk-var > /dev/null || exit 1
  PYTHONPATH=/tmp/pk-var timeout 260 python3 lab/gpu/mask_kernel_split.py > "$OUT/split.md" 2>&1
  PYTHONPATH=/tmp/pk-var timeout 100 python3 lab/gpu/step_timeline_probe.py --shapes 1,24,256,64:1,24,1536,128 \
    --steps 100 > "$OUT/timeline-var.md" 2>&1
  echo "== split (after $SECONDS s)"; grep -A8 "ratios of" "$OUT/split.md"; grep "in all" "$OUT/split.md"
  grep -B2 -A12 "host µs" "$OUT/timeline-var.md"
}

stage_time() {
  . lab/gpu/package_from_build.sh
  package_from_build build-base /tmp/pk-base > /dev/null && package_from_build $V/build-pending /tmp/pk-var > /dev/null || exit 1
  for i in 1 2; do
    for w in base var; do
      PYTHONPATH=/tmp/pk-$w timeout 150 python3 bench/python/host_cost.py --device cuda \
        --shapes 1x24x256x64,1x24x1536x128 > "$OUT/host-$w-$i.md" 2>&1
    done
  done
  for w in base var; do
    PYTHONPATH=/tmp/pk-$w timeout 100 python3 lab/gpu/step_timeline_probe.py --shapes 1,24,256,64 --kernels \
      --steps 200 > "$OUT/timeline-$w.md" 2>&1
  done
  for shape in "--seq 1536" "--seq 4608"; do
    for w in base var; do
      b=build-base; [ $w = var ] && b=$V/build-pending
      for pass in "" "--backward"; do
        echo "$w $shape $pass: $(timeout 60 $b/tools/jattn run --backend cuda --heads 24 --dim 128 $shape $pass --no-check --json |
          python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('%.4f ms %s' % (d['ms'], d.get('kernel','')))")"
      done
    done
  done | tee "$OUT/run-times.txt"
  echo "== time (after $SECONDS s)"
  for f in "$OUT"/host-*.md; do echo "$f"; grep "^| (1" "$f"; done
  grep -A12 "kernels a step" "$OUT"/timeline-*.md | grep -v "^--$" | head -60
}

for s in "$@"; do "stage_$s"; done
echo "all done after $SECONDS s"
