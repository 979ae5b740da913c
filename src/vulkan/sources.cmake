# The vk backend. JATTN_VULKAN=AUTO builds it when glslc, spirv-val and the Vulkan headers are
# found, ON requires them, OFF skips it; without it the stub vk_unavailable.c reports the backend
# unavailable. The library never links Vulkan: the loader is opened at run time (vk_loader.c).
# Sets JATTN_VULKAN_ENABLED (this file is include()d, so in the top directory's scope).
#
# Kernels: shaders/attn_f32.comp compiled once per head-dim family (-DDMAX=...) by glslc for
# Vulkan 1.1, each module validated by spirv-val and checked by spirv-dis for the
# SignedZeroInfNanPreserve execution mode, then embedded as uint32_t arrays in vk_spirv.c.
set(JATTN_VULKAN "AUTO" CACHE STRING "Build the vk backend: AUTO (when glslc, spirv-val and the Vulkan headers are found), ON or OFF")
set_property(CACHE JATTN_VULKAN PROPERTY STRINGS AUTO ON OFF)
set(JATTN_VULKAN_ENABLED OFF)
set(JATTN_VK_FAMILIES 16 32 64 96 128 192 256 512 1024)
# Modules <family>x<rows>[w]: every family with 64-row workgroups (TM 4), the common ones also with
# 128 (TM 8), 64 and 128 also in the WIDE form for devices with 48 KiB of shared memory.
set(JATTN_VK_MODULES "")
foreach(dmax ${JATTN_VK_FAMILIES})
  list(APPEND JATTN_VK_MODULES "${dmax}x64")
  if(dmax EQUAL 64 OR dmax EQUAL 128 OR dmax EQUAL 256)
    list(APPEND JATTN_VK_MODULES "${dmax}x128")
  endif()
  if(dmax EQUAL 64 OR dmax EQUAL 128)
    list(APPEND JATTN_VK_MODULES "${dmax}x128w")
  endif()
endforeach()
# (JATTN_VK_KERNEL=2 and 3 were attn2_f32.comp, retired: slower than attn3 everywhere it was
# measured, bench/results/vk-h200-2026-12-02b/; those values now run attn_f32.comp.)
# shaders/attn3_f32.comp (64-row workgroups of 128 invocations, 8 x 4 register blocks, double-buffered
# stages): 64 and 128 in the 48 KiB form ("t") and the SMALL 32 KiB form ("ts"), each also with
# PREFETCH ("p"). Chosen with JATTN_VK_KERNEL=4 (without prefetch) or 5 (with).
list(APPEND JATTN_VK_MODULES "64x64t" "128x64t" "64x64ts" "128x64ts" "64x64tp" "128x64tp" "64x64tsp" "128x64tsp")
# The same with TX=32 ("tw": 256 invocations, 8 x 2 blocks of S, 8 x 4 of O) for 128 only: JATTN_VK_KERNEL=6 or 7.
list(APPEND JATTN_VK_MODULES "128x64tw" "128x64tws" "128x64twp" "128x64twsp")
# And with TX=32, RPT=4 ("tq": 512 invocations, 4 x 2 blocks of S, 4 x 4 of O, fewer registers per
# invocation): JATTN_VK_KERNEL=8 or 9.
list(APPEND JATTN_VK_MODULES "128x64tq" "128x64tqs" "128x64tqp" "128x64tqsp")
# shaders/attn_cm_f32.comp (tensor cores through VK_NV_cooperative_matrix, f32 as scaled fp16
# parts: q and k in three, v and P in two) for 128: "cm" (JATTN_VK_KERNEL=10, only where the device
# has the extension), "cg" the same with subgroup barriers (SG_SYNC, 13), its emulation "ce" (plain
# float32 loops, 11: lavapipe, the tests), their pre-pass "cs" (shaders/split_f16x2.comp); "c2" q and
# k in two parts too (14) with its pre-pass "c2s".
list(APPEND JATTN_VK_MODULES "128x64cm" "128x64ce" "128x64cs" "128x64cg" "128x64c2" "128x64c2s")

if(JATTN_VULKAN STREQUAL "AUTO" OR JATTN_VULKAN STREQUAL "ON")
  find_program(JATTN_GLSLC glslc)
  find_program(JATTN_SPIRV_VAL spirv-val)
  find_program(JATTN_SPIRV_DIS spirv-dis)
  find_path(JATTN_VULKAN_INCLUDE_DIR vulkan/vulkan.h)
  set(_jattn_vk_missing "")
  foreach(v JATTN_GLSLC JATTN_SPIRV_VAL JATTN_SPIRV_DIS JATTN_VULKAN_INCLUDE_DIR)
    if(NOT ${v})
      list(APPEND _jattn_vk_missing ${v})
    endif()
  endforeach()
  if(_jattn_vk_missing)
    if(JATTN_VULKAN STREQUAL "ON")
      message(FATAL_ERROR "JATTN_VULKAN=ON but not found: ${_jattn_vk_missing} (Debian: glslc spirv-tools libvulkan-dev)")
    endif()
    message(STATUS "jattn: the vk backend is not built (not found: ${_jattn_vk_missing}; Debian: glslc spirv-tools libvulkan-dev)")
  else()
    set(JATTN_VULKAN_ENABLED ON)
  endif()
elseif(NOT JATTN_VULKAN STREQUAL "OFF")
  message(FATAL_ERROR "JATTN_VULKAN must be AUTO, ON or OFF (is ${JATTN_VULKAN})")
endif()

if(JATTN_VULKAN_ENABLED)
  set(_vk_dir ${CMAKE_CURRENT_LIST_DIR})
  set(_vk_out ${CMAKE_CURRENT_BINARY_DIR}/vulkan)
  file(MAKE_DIRECTORY ${_vk_out})
  set(_vk_spvs "")
  foreach(module ${JATTN_VK_MODULES})
    string(REGEX MATCH "^([0-9]+)x([0-9]+)(w|t|ts|tp|tsp|tw|tws|twp|twsp|tq|tqs|tqp|tqsp|cm|ce|cs|cg|c2|c2s)?$" _m ${module})
    set(dmax ${CMAKE_MATCH_1})
    set(rows ${CMAKE_MATCH_2})
    set(_form "${CMAKE_MATCH_3}")
    set(_defs -DDMAX=${dmax})
    set(_src ${_vk_dir}/shaders/attn_f32.comp)
    # glslc -O: except for the cooperative-matrix modules, whose matrix additions crash Debian 12's
    # spirv-opt (2023.1; segmentation fault); the driver optimises those (unroll hints kept)
    set(_opt -O)
    if(_form STREQUAL "cm" OR _form STREQUAL "cg" OR _form STREQUAL "c2")
      set(_opt "")
    endif()
    if(_form STREQUAL "cm")
      set(_src ${_vk_dir}/shaders/attn_cm_f32.comp)
      list(APPEND _defs -DQK3=1)
    elseif(_form STREQUAL "ce")
      set(_src ${_vk_dir}/shaders/attn_cm_f32.comp)
      list(APPEND _defs -DQK3=1 -DEMULATE=1)
    elseif(_form STREQUAL "cg")
      set(_src ${_vk_dir}/shaders/attn_cm_f32.comp)
      list(APPEND _defs -DQK3=1 -DSG_SYNC=1)
    elseif(_form STREQUAL "c2")
      set(_src ${_vk_dir}/shaders/attn_cm_f32.comp)
    elseif(_form STREQUAL "cs")
      set(_src ${_vk_dir}/shaders/split_f16x2.comp)
      list(APPEND _defs -DQK3=1)
    elseif(_form STREQUAL "c2s")
      set(_src ${_vk_dir}/shaders/split_f16x2.comp)
    elseif(_form MATCHES "^t")
      set(_src ${_vk_dir}/shaders/attn3_f32.comp)
      if(_form MATCHES "^tw")
        list(APPEND _defs -DTX=32)
      endif()
      if(_form MATCHES "^tq")
        list(APPEND _defs -DTX=32 -DRPT=4)
      endif()
      if(_form MATCHES "s")
        list(APPEND _defs -DSMALL=1)
      endif()
      if(_form MATCHES "p$")
        list(APPEND _defs -DPREFETCH=1)
      endif()
    else()
      math(EXPR tm "${rows} / 16")
      list(APPEND _defs -DTM=${tm})
      if(_form STREQUAL "w")
        list(APPEND _defs -DWIDE=1)
      endif()
    endif()
    set(_spv ${_vk_out}/attn_f32_d${module}.spv)
    add_custom_command(OUTPUT ${_spv}
      COMMAND ${JATTN_GLSLC} --target-env=vulkan1.1 ${_opt} ${_defs} ${_src} -o ${_spv}
      COMMAND ${JATTN_SPIRV_VAL} --target-env vulkan1.1 ${_spv}
      COMMAND ${CMAKE_COMMAND} -DSPIRV_DIS=${JATTN_SPIRV_DIS} -DSPV=${_spv} -P ${_vk_dir}/check_spirv.cmake
      DEPENDS ${_src} ${_vk_dir}/shaders/attn_common.glsl ${_vk_dir}/shaders/f16x2_layout.glsl ${_vk_dir}/check_spirv.cmake
      COMMENT "glslc + spirv-val: ${_src}, head-dim family ${dmax}, ${rows}-row workgroups${_form}"
      VERBATIM)
    list(APPEND _vk_spvs ${_spv})
  endforeach()
  add_custom_command(OUTPUT ${_vk_out}/vk_spirv.c
    COMMAND ${CMAKE_COMMAND} -DOUT=${_vk_out}/vk_spirv.c -DDIR=${_vk_out} "-DMODULES=${JATTN_VK_MODULES}"
            -P ${_vk_dir}/embed_spirv.cmake
    DEPENDS ${_vk_spvs} ${_vk_dir}/embed_spirv.cmake
    COMMENT "embedding the SPIR-V modules in vk_spirv.c"
    VERBATIM)
  target_sources(jattn_objects PRIVATE
    ${_vk_dir}/vk_loader.c
    ${_vk_dir}/vk_device.c
    ${_vk_dir}/vk_backend.c
    ${_vk_dir}/vk_range.c
    ${_vk_out}/vk_spirv.c)
  target_include_directories(jattn_objects PRIVATE ${JATTN_VULKAN_INCLUDE_DIR})
  find_package(Threads REQUIRED)
  target_link_libraries(jattn_objects PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  message(STATUS "jattn: vk backend built (${JATTN_GLSLC}; modules ${JATTN_VK_MODULES})")
else()
  target_sources(jattn_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/vk_unavailable.c)
endif()
