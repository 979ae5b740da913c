#!/bin/bash
# One H200 call for the vk backend (bench/results/vk-h200-2026-12-02/): NVIDIA's Vulkan driver through
# a carried loader. Run from the folder holding vk_bench, the test programs, torch_sdpa_peer.py,
# vk_summary.py and debs/ (Debian 12's libvulkan1 and the GL vendor-neutral libraries its ICD loads),
# as built by bench/vulkan/build_carry.sh. Writes tests.txt, bench.jsonl, summary.txt under $OUT.
cd "$(dirname "$0")" || exit 1
OUT=${OUT:-/tmp/vk-out}
mkdir -p "$OUT"
for f in debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
{
    echo "== float controls (vk_bench 1 1 64 64 2)"
    timeout 60 ./vk_bench 1 1 64 64 2
    for k in 1 3; do
        echo "== test_edges vk, JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k timeout 90 ./test_edges vk 2>&1 | grep -v "^ok" | tail -8
    done
    for k in 2 3; do
        echo "== test_vulkan, JATTN_VK_KERNEL=$k"
        JATTN_VK_KERNEL=$k timeout 90 ./test_vulkan 2>&1 | tail -13
    done
    echo "== test_parity vk (quick), JATTN_VK_KERNEL=3"
    JATTN_VK_KERNEL=3 JATTN_TEST_QUICK=1 timeout 120 ./test_parity vk 2>&1 | tail -3
    echo "== test_padding vk, JATTN_VK_KERNEL=3"
    JATTN_VK_KERNEL=3 timeout 90 ./test_padding vk 2>&1 | tail -2
} 2>&1 | tee "$OUT/tests.txt"
{
    for shape in "1536 128" "4608 128" "1536 64"; do
        for k in 1 2 3; do JATTN_VK_KERNEL=$k timeout 60 ./vk_bench 1 24 $shape 10; done
        JATTN_VK_KERNEL=3 JATTN_VK_SHARED_LIMIT=32768 timeout 60 ./vk_bench 1 24 $shape 10
    done
    PYTHONUNBUFFERED=1 timeout 120 python3 torch_sdpa_peer.py 1536 4608 1536:64
} 2>&1 | tee "$OUT/bench.jsonl"
python3 vk_summary.py "$OUT/bench.jsonl" | tee "$OUT/summary.txt"
