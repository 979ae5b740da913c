#!/bin/bash
# H200 run 1 of the vk backend (bench/results/vk-h200-2026-12-01/): NVIDIA's Vulkan driver through a carried loader.
C=.carry-vulkan
for f in $C/gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
{
for rows in 64 128; do
  for s in 1536 4608; do JATTN_VK_ROWS=$rows $C/vk_bench 1 24 $s 128 20; done
  JATTN_VK_ROWS=$rows $C/vk_bench 1 24 1536 64 20
done
PYTHONUNBUFFERED=1 python3 $C/torch_sdpa_peer.py 1536 4608
} 2>&1 | tee $OUT/bench.jsonl
{
for rows in 64 128; do
  echo "== JATTN_VK_ROWS=$rows"
  JATTN_VK_ROWS=$rows JATTN_TEST_QUICK=1 timeout 120 $C/test_parity vk | tail -4
  JATTN_VK_ROWS=$rows timeout 60 $C/test_padding vk | tail -3
  JATTN_VK_ROWS=$rows timeout 60 $C/test_edges vk | tail -3
  JATTN_VK_ROWS=$rows timeout 120 $C/test_vulkan | tail -14
done
} 2>&1 | tee $OUT/tests.txt
