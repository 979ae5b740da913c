# The jattn command (build/tools/jattn): run, bench, compare, gen. See tools/cli_args.c for the
# usage text. Its measurements come from the kit (kit/, target jattn_kit).

add_executable(jattn
  ${CMAKE_CURRENT_LIST_DIR}/jattn.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_args.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_common.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_mask.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_run.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_bench.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_backward.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_tools.c
  ${CMAKE_CURRENT_LIST_DIR}/cli_backends.c)
target_compile_definitions(jattn PRIVATE _POSIX_C_SOURCE=200809L)
target_link_libraries(jattn PRIVATE jattn_kit jattn_static m)
install(TARGETS jattn RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
include(${CMAKE_CURRENT_LIST_DIR}/cli_parallel.cmake) # run --parallel
