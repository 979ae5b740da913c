# Tests of the jattn command and its .npy I/O (included by tests/CMakeLists.txt).
jattn_add_test(test_npy SOURCES test_npy.c LIBS jattn_kit)
target_compile_definitions(test_npy PRIVATE _POSIX_C_SOURCE=200809L)

# End to end through the built command: run, --json, .npy in and out, compare, every error exit.
add_test(NAME test_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh $<TARGET_FILE:jattn>)
set_tests_properties(test_cli PROPERTIES SKIP_RETURN_CODE 77)

# Install into a temporary prefix, then build consumers with pkg-config and find_package.
add_test(NAME test_install COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh ${PROJECT_BINARY_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer ${CMAKE_C_COMPILER} ${CMAKE_COMMAND})
set_tests_properties(test_install PROPERTIES SKIP_RETURN_CODE 77)
