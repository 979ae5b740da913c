# The .npy I/O library of the jattn command (tests link it too).
add_library(jattn_npy STATIC ${CMAKE_CURRENT_LIST_DIR}/npy.c)
target_include_directories(jattn_npy PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(jattn_npy PRIVATE _POSIX_C_SOURCE=200809L)
