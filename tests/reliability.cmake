# Reliability tests (issue 6): numerics at the edges per backend (test_edges, registered for
# every backend in CMakeLists.txt), concurrency and determinism, the jattn command under hostile
# input, and replay of the fuzz corpora.
find_package(Threads REQUIRED)

# The cpu backend's edges once per instruction set, forced by JATTN_CPU_ISA (skipped where this
# CPU or build lacks it).
foreach(isa avx512 avx2 neon generic)
  add_test(NAME test_edges_cpu_${isa} COMMAND test_edges cpu)
  set_tests_properties(test_edges_cpu_${isa} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "JATTN_CPU_ISA=${isa}")
endforeach()

jattn_add_test(test_concurrency SOURCES test_concurrency.c LIBS Threads::Threads)

# Replay of the fuzz corpora (and the libFuzzer harnesses in a JATTN_SANITIZE=fuzzer build).
include(${PROJECT_SOURCE_DIR}/fuzz/fuzz.cmake)

# The jattn command under hostile input: every malformed class, exit code, one stderr line,
# nothing left behind.
if(TARGET jattn)
  add_test(NAME test_cli_hostile COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_hostile.sh $<TARGET_FILE:jattn>)
endif()
