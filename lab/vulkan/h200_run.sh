#!/bin/bash
# One H200 call for the vk backend (bench/results/vk-h200-2026-12-02*/): NVIDIA's Vulkan driver through
# a carried loader. Run from the folder holding vk_bench, the test programs, torch_sdpa_peer.py,
# vk_summary.py and debs/ (Debian 12's libvulkan1 and the GL vendor-neutral libraries its ICD loads),
# as built by lab/vulkan/build_carry.sh. Writes gpu.txt, tests.txt, bench.jsonl, summary.txt under $OUT.
# JATTN_VK_KERNEL values: TEST_KERNELS go through the vk suites, BENCH_KERNELS through vk_bench at
# (1,24,1536,128), (1,24,4608,128), (1,24,1536,64), SMALL_KERNELS also in their 32 KiB forms, then
# SCALE_KERNEL at (1,H,1536,128) for H in SCALE_HEADS. "default": JATTN_VK_KERNEL empty (the device's default).
# Masks (MASK_KERNELS, MASK_SHAPES, MASKS: vk_bench's mask words, commas for spaces): each mask at each
# shape beside the unmasked line of the same build (vk_summary.py gives the time as a fraction of it;
# causal should be <= 0.55), the PyTorch peer with is_causal / enable_gqa; with vk_bench_base (a
# build of BASELINE, build_carry.sh) the unmasked lines again, their out_hash to compare bit for bit.
cd "$(dirname "$0")" || exit 1
OUT=${OUT:-/tmp/vk-out}
TEST_KERNELS=${TEST_KERNELS:-"default 1"}
BENCH_KERNELS=${BENCH_KERNELS:-"1 default"}
SMALL_KERNELS=${SMALL_KERNELS:-""}
SCALE_KERNEL=${SCALE_KERNEL:-default}
SCALE_HEADS=${SCALE_HEADS:-"4 8 16 48 96"}
MASK_KERNELS=${MASK_KERNELS:-"default 1"}
MASK_SHAPES=${MASK_SHAPES:-"1536:128 4608:128 1536:64"}
MASKS=${MASKS:-"causal causal-br kv=6 kv=1 causal,kv=6 bias segments=4 causal,segments=4,bias"}
mkdir -p "$OUT"
for f in debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
{
    echo "== float controls (vk_bench 1 1 64 64 2)"
    timeout 60 ./vk_bench 1 1 64 64 2
    for k0 in $TEST_KERNELS; do
        k=$k0; [ "$k" = default ] && k=
        echo "== test_vulkan, JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k timeout 90 ./test_vulkan 2>&1 | grep -v "^ok   normal\|^ok   refusals\|^ok   context"
        echo "== test_edges vk, JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k timeout 90 ./test_edges vk 2>&1 | grep -v "^ok" | tail -8
        echo "== test_parity vk (quick), JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k JATTN_TEST_QUICK=1 timeout 120 ./test_parity vk 2>&1 | tail -3
        echo "== test_padding vk, JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k timeout 90 ./test_padding vk 2>&1 | tail -2
        if [ -x ./test_masks ]; then
            echo "== test_masks vk, JATTN_VK_KERNEL=$k"
            JATTN_VK_KERNEL=$k timeout 120 ./test_masks vk 2>&1 | grep -v "^ok" | tail -8
        fi
    done
} 2>&1 | tee "$OUT/tests.txt"
{
    for shape in "1536 128" "4608 128" "1536 64"; do
        for k in $BENCH_KERNELS; do [ "$k" = default ] && k=; JATTN_VK_KERNEL=$k timeout 60 ./vk_bench 1 24 $shape 10; done
        for k in $SMALL_KERNELS; do JATTN_VK_KERNEL=$k JATTN_VK_SHARED_LIMIT=32768 timeout 60 ./vk_bench 1 24 $shape 10; done
    done
    # throughput against the number of workgroups (24 per head at S = 1536 with 64-row workgroups)
    [ "$SCALE_KERNEL" = default ] && SCALE_KERNEL=
    for h in $SCALE_HEADS; do JATTN_VK_KERNEL=$SCALE_KERNEL timeout 60 ./vk_bench 1 $h 1536 128 10; done
    PYTHONUNBUFFERED=1 timeout 120 python3 torch_sdpa_peer.py 1536 4608 1536:64
    # masks and grouped-query heads, each beside the unmasked line of its shape and kernel
    peers=""
    for shape in $MASK_SHAPES; do
        s=${shape%:*} d=${shape#*:}
        for k in $MASK_KERNELS; do
            [ "$k" = default ] && k=
            JATTN_VK_KERNEL=$k timeout 60 ./vk_bench 1 24 "$s" "$d" 10
            [ -x ./vk_bench_base ] && JATTN_VK_KERNEL=$k timeout 60 ./vk_bench_base 1 24 "$s" "$d" 10
            for mask in $MASKS; do
                # shellcheck disable=SC2046 # the mask words, split on purpose
                JATTN_VK_KERNEL=$k timeout 60 ./vk_bench 1 24 "$s" "$d" 10 $(echo "$mask" | tr , ' ')
            done
        done
        peers="$peers $s:$d:causal $s:$d:kv=6 $s:$d:kv=1 $s:$d:causal:kv=6"
    done
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 timeout 300 python3 torch_sdpa_peer.py $peers
} 2>&1 | tee "$OUT/bench.jsonl"
python3 vk_summary.py "$OUT/bench.jsonl" | tee "$OUT/summary.txt"
