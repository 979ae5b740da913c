# Tests of the vk backend (Vulkan; lavapipe in CI): the parity, padding and edge suites (test_parity
# vk, test_padding vk, test_edges vk: registered for every backend in CMakeLists.txt), the mask suite
# (test_masks vk, below while CMakeLists.txt registers it for ref only) plus test_vulkan:
# FLUX-length heads, determinism, context reuse, pieces, refusals, and the reasons given without a
# loader or device. Each exits 77 (skipped), saying why, where no Vulkan device is usable; CI
# installs lavapipe, so there they run. lavapipe computes at ~1 GFLOP/s on 2 cores: the parity
# suite runs JATTN_TEST_QUICK (without its (24,1536,128) shape), test_vulkan single heads.
if(JATTN_VULKAN_ENABLED)
  jattn_add_test(test_vulkan SOURCES test_vulkan.c)
  jattn_add_test(test_vulkan SOURCES test_vulkan.c ARGS pieces)
  set_tests_properties(test_vulkan_pieces PROPERTIES ENVIRONMENT "JATTN_VK_MAX_BINDING_BYTES=65536")
  jattn_add_test(test_vulkan SOURCES test_vulkan.c ARGS noloader)
  set_tests_properties(test_vulkan_noloader PROPERTIES ENVIRONMENT "JATTN_VK_LOADER=/nonexistent/libvulkan.so.1")
  jattn_add_test(test_vulkan SOURCES test_vulkan.c ARGS baddevice)
  set_tests_properties(test_vulkan_baddevice PROPERTIES ENVIRONMENT "JATTN_VK_DEVICE=99")
  set_tests_properties(test_parity_vk PROPERTIES ENVIRONMENT "JATTN_TEST_QUICK=1")
  # Masks and grouped-query heads (the vk forward serves every part)
  if(NOT TEST test_masks_vk)
    jattn_add_test(test_masks SOURCES test_masks.c ARGS vk)
  endif()
  # The third kernel (shaders/attn3_f32.comp, TX=32 with PREFETCH: the NVIDIA default at head dim 128)
  # forced with JATTN_VK_KERNEL=7 on lavapipe, where it runs its 32 KiB form: the edge, parity and
  # padding suites.
  add_test(NAME test_edges_vk_kernel7 COMMAND test_edges vk)
  add_test(NAME test_parity_vk_kernel7 COMMAND test_parity vk)
  add_test(NAME test_padding_vk_kernel7 COMMAND test_padding vk)
  add_test(NAME test_masks_vk_kernel7 COMMAND test_masks vk)
  set_tests_properties(test_edges_vk_kernel7 test_padding_vk_kernel7 test_masks_vk_kernel7 PROPERTIES SKIP_RETURN_CODE 77
                       ENVIRONMENT "JATTN_VK_KERNEL=7")
  set_tests_properties(test_parity_vk_kernel7 PROPERTIES SKIP_RETURN_CODE 77
                       ENVIRONMENT "JATTN_VK_KERNEL=7;JATTN_TEST_QUICK=1")
  # The 48 KiB module NVIDIA runs by default (JATTN_VK_KERNEL=7: attn3_f32.comp, TX=32, PREFETCH):
  # lavapipe reports 32 KiB of shared memory but runs them; JATTN_VK_SHARED_LIMIT raises the limit
  # on a software device only (vk_device.c).
  add_test(NAME test_edges_vk_kernel7_48k COMMAND test_edges vk)
  add_test(NAME test_vulkan_kernel7_48k COMMAND test_vulkan)
  add_test(NAME test_masks_vk_kernel7_48k COMMAND test_masks vk)
  set_tests_properties(test_edges_vk_kernel7_48k test_vulkan_kernel7_48k test_masks_vk_kernel7_48k PROPERTIES
                       SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_VK_KERNEL=7;JATTN_VK_SHARED_LIMIT=49152")
endif()
