# Tests of the jattn command and its .npy I/O (included by tests/CMakeLists.txt).
jattn_add_test(test_npy SOURCES test_npy.c LIBS jattn_npy)
target_compile_definitions(test_npy PRIVATE _POSIX_C_SOURCE=200809L)
