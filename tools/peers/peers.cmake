# Peers measured by `jattn bench` (target jattn_peers): the FMA peak and the BLAS attention
# baseline (OpenBLAS found at run time by dlopen: no build dependency on it).
add_library(jattn_peers STATIC ${CMAKE_CURRENT_LIST_DIR}/peers.c)
target_include_directories(jattn_peers PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(jattn_peers PRIVATE _POSIX_C_SOURCE=200809L)
target_link_libraries(jattn_peers PUBLIC ${CMAKE_DL_LIBS} m)
if(OpenMP_C_FOUND)
  target_link_libraries(jattn_peers PUBLIC OpenMP::OpenMP_C)
endif()
