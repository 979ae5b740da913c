# The vk backend. JATTN_VULKAN=AUTO builds it when glslc, spirv-val and the Vulkan headers are
# found, ON requires them, OFF skips it; without it the stub vk_unavailable.c reports the backend
# unavailable. The library never links Vulkan: the loader is opened at run time (vk_loader.c).
# Sets JATTN_VULKAN_ENABLED (this file is include()d, so in the top directory's scope).
#
# Kernels: shaders/attn_f32.comp compiled once per head-dim family (-DDMAX=...), attn3_f32.comp in two
# forms for head dim 128 (below), by glslc for
# Vulkan 1.1, each module validated by spirv-val and checked by spirv-dis for the
# SignedZeroInfNanPreserve execution mode, then embedded as uint32_t arrays in vk_spirv.c.
set(JATTN_VULKAN "AUTO" CACHE STRING "Build the vk backend: AUTO (when glslc, spirv-val and the Vulkan headers are found), ON or OFF")
set_property(CACHE JATTN_VULKAN PROPERTY STRINGS AUTO ON OFF)
set(JATTN_VULKAN_ENABLED OFF)
set(JATTN_VK_FAMILIES 16 32 64 96 128 192 256 512 1024)
# Modules <family>x<rows> of shaders/attn_f32.comp: 128-row workgroups (TM 8) for 64, 128 and 256
# (the faster on the H200), 64-row ones (TM 4) for the other families.
set(JATTN_VK_MODULES "")
foreach(dmax ${JATTN_VK_FAMILIES})
  if(dmax EQUAL 64 OR dmax EQUAL 128 OR dmax EQUAL 256)
    list(APPEND JATTN_VK_MODULES "${dmax}x128")
  else()
    list(APPEND JATTN_VK_MODULES "${dmax}x64")
  endif()
endforeach()
# shaders/attn3_f32.comp for 128 with TX=32 and PREFETCH (64-row workgroups of 256 invocations, 8 x 2
# blocks of S, 8 x 4 of O, double-buffered stages): the 48 KiB form ("twp", the NVIDIA default at
# head dim 128) and the SMALL 32 KiB one ("twsp"); JATTN_VK_KERNEL=7 elsewhere. The other forms and
# kernels measured slower on the H200 and were removed (src/vulkan/NOTES.md, "Removed").
list(APPEND JATTN_VK_MODULES "128x64twp" "128x64twsp")

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
    string(REGEX MATCH "^([0-9]+)x([0-9]+)(twp|twsp)?$" _m ${module})
    set(dmax ${CMAKE_MATCH_1})
    set(rows ${CMAKE_MATCH_2})
    set(_form "${CMAKE_MATCH_3}")
    set(_defs -DDMAX=${dmax})
    set(_src ${_vk_dir}/shaders/attn_f32.comp)
    if(_form STREQUAL "twp" OR _form STREQUAL "twsp")
      set(_src ${_vk_dir}/shaders/attn3_f32.comp)
      list(APPEND _defs -DTX=32)
      if(_form STREQUAL "twsp")
        list(APPEND _defs -DSMALL=1)
      endif()
      list(APPEND _defs -DPREFETCH=1)
    else()
      math(EXPR tm "${rows} / 16")
      list(APPEND _defs -DTM=${tm})
    endif()
    set(_spv ${_vk_out}/attn_f32_d${module}.spv)
    add_custom_command(OUTPUT ${_spv}
      COMMAND ${JATTN_GLSLC} --target-env=vulkan1.1 -O ${_defs} ${_src} -o ${_spv}
      COMMAND ${JATTN_SPIRV_VAL} --target-env vulkan1.1 ${_spv}
      COMMAND ${CMAKE_COMMAND} -DSPIRV_DIS=${JATTN_SPIRV_DIS} -DSPV=${_spv} -P ${_vk_dir}/check_spirv.cmake
      DEPENDS ${_src} ${_vk_dir}/shaders/attn_common.glsl ${_vk_dir}/check_spirv.cmake
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
