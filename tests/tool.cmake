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

# The docs against the code: every backend of the library named in README.md, python/README.md and
# docs/DESIGN.md §3, auto's order as the library's, every src/*/ folder in the layer map, the
# backends the per-backend suites were registered for (CMakeLists.txt) as the library's, and the
# kernel ladders of src/cuda/NOTES.md as the code walks them (test_cuda_ladder: plain C, built with
# the two files of the cuda backend it checks on every machine, with or without CUDA).
add_executable(test_cuda_ladder test_cuda_ladder.c ${PROJECT_SOURCE_DIR}/src/cuda/cuda_versions.c
                                ${PROJECT_SOURCE_DIR}/src/cuda/sm90_contract.c)
target_link_libraries(test_cuda_ladder PRIVATE jattn_internal m)
add_test(NAME test_docs COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_docs.sh --ladder $<TARGET_FILE:test_cuda_ladder>
  $<TARGET_FILE:jattn> ${PROJECT_SOURCE_DIR} ${JATTN_TEST_BACKENDS})
