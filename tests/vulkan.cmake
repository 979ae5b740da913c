# Tests of the vk backend (Vulkan; lavapipe in CI): the parity, padding and edge suites (test_parity
# vk, test_padding vk, test_edges vk, in CMakeLists.txt and reliability.cmake) plus test_vulkan:
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
endif()
