# Fuzz harnesses (included from tests/reliability.cmake).
#
# Every build: replay_<harness>, the harness with a plain main() (replay_main.c), and a ctest
# entry fuzz_replay_<harness> that runs it over fuzz/corpus/<harness>/ — the seed corpus and
# every crash ever found, so a crash once found stays a regression test.
# Fuzzing builds (JATTN_SANITIZE=fuzzer, clang): <harness> linked with libFuzzer, run for a
# bounded time by cmake/sanitizer_tests.sh fuzz.
set(JATTN_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

function(jattn_fuzz_harness name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  set(srcs ${JATTN_FUZZ_DIR}/${name}.c ${F_SOURCES})
  add_executable(replay_${name} ${JATTN_FUZZ_DIR}/replay_main.c ${srcs})
  set(targets replay_${name})
  if(JATTN_SANITIZE STREQUAL "fuzzer")
    add_executable(${name} ${srcs})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    list(APPEND targets ${name})
  endif()
  foreach(t ${targets})
    target_link_libraries(${t} PRIVATE ${F_LIBS} jattn_static m)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/tools ${PROJECT_SOURCE_DIR}/src)
    target_compile_definitions(${t} PRIVATE _POSIX_C_SOURCE=200809L)
  endforeach()
  add_test(NAME fuzz_replay_${name} COMMAND replay_${name} ${JATTN_FUZZ_DIR}/corpus/${name})
endfunction()

jattn_fuzz_harness(fuzz_forward LIBS jattn_kit)
if(TARGET jattn_kit)
  jattn_fuzz_harness(fuzz_npy LIBS jattn_kit)
  jattn_fuzz_harness(fuzz_cli_args SOURCES ${PROJECT_SOURCE_DIR}/tools/cli_args.c LIBS jattn_kit)
endif()
