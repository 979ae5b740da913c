#!/bin/bash
# One H200 call for the vk backend's tensor-core kernel (shaders/attn_cm_f32.comp, JATTN_VK_KERNEL=10;
# bench/results/vk-h200-2026-12-02c/): NVIDIA's Vulkan driver through a carried loader, as
# h200_run.sh. Run from the folder build_carry.sh filled (vk_bench, the four vk test programs,
# torch_sdpa_peer.py, vk_summary.py) plus debs/. Writes gpu.txt, bench.jsonl, tests.txt, summary.txt
# under $OUT. Order: what the driver reports, the speed of kind 10 against the default (7) with
# the driver's register counts, PyTorch fp32 SDPA, then the vk suites with kind 10; each step
# under its own timeout.
cd "$(dirname "$0")" || exit 1
OUT=${OUT:-/tmp/vk-out}
KINDS=${KINDS:-"default 10 13 14"}
TEST_KINDS=${TEST_KINDS:-"10 13"}
mkdir -p "$OUT"
for f in debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
{
    JATTN_VK_KERNEL=10 timeout 60 ./vk_bench 1 1 256 128 2
    # the emulation (no cooperative matrices: the same splits, layouts and softmax on the SIMT units)
    JATTN_VK_KERNEL=11 timeout 60 ./vk_bench 1 4 1536 128 2
    for shape in "1536 128" "4608 128"; do
        for k in $KINDS; do
            [ "$k" = default ] && k=
            JATTN_VK_KERNEL=$k JATTN_VK_PIPELINE_STATS=1 timeout 40 ./vk_bench 1 24 $shape 10
        done
    done
    PYTHONUNBUFFERED=1 timeout 90 python3 torch_sdpa_peer.py 1536 4608
} 2>&1 | tee "$OUT/bench.jsonl"
for k in $TEST_KINDS; do
    echo "== test_vulkan, JATTN_VK_KERNEL=$k"
    JATTN_VK_KERNEL=$k timeout 45 ./test_vulkan 2>&1 | tail -20
    echo "== test_edges vk, JATTN_VK_KERNEL=$k"
    JATTN_VK_KERNEL=$k timeout 45 ./test_edges vk 2>&1 | grep -v "^ok" | tail -12
    echo "== test_parity vk (quick), JATTN_VK_KERNEL=$k"
    JATTN_VK_KERNEL=$k JATTN_TEST_QUICK=1 timeout 45 ./test_parity vk 2>&1 | grep -v "^ok" | tail -12
    echo "== test_padding vk, JATTN_VK_KERNEL=$k"
    JATTN_VK_KERNEL=$k timeout 45 ./test_padding vk 2>&1 | grep -v "^ok" | tail -12
done 2>&1 | tee "$OUT/tests.txt"
python3 vk_summary.py "$OUT/bench.jsonl" | tee "$OUT/summary.txt"
