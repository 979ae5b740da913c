# Device-resident timing for the jattn command (target jattn_device_timer): the CUDA version
# when the cuda backend is built, else a stub that reports it missing.
if(JATTN_CUDA_ENABLED)
  add_library(jattn_device_timer STATIC ${CMAKE_CURRENT_LIST_DIR}/device_timer_cuda.c)
  target_link_libraries(jattn_device_timer PUBLIC jattn_static PRIVATE CUDA::cudart)
else()
  add_library(jattn_device_timer STATIC ${CMAKE_CURRENT_LIST_DIR}/device_timer_none.c)
  target_link_libraries(jattn_device_timer PUBLIC jattn_static)
endif()
target_include_directories(jattn_device_timer PUBLIC ${CMAKE_CURRENT_LIST_DIR})
