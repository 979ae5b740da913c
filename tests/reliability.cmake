# Reliability tests (issue 6): numerics at the edges per backend, concurrency and
# determinism, the jattn command under hostile input, and replay of the fuzz corpora.
find_package(Threads REQUIRED)

foreach(b ref cpu cuda)
  jattn_add_test(test_edges SOURCES test_edges.c ARGS ${b})
endforeach()

jattn_add_test(test_concurrency SOURCES test_concurrency.c LIBS Threads::Threads)

# Replay of the fuzz corpora (and the libFuzzer harnesses in a JATTN_SANITIZE=fuzzer build).
include(${PROJECT_SOURCE_DIR}/fuzz/fuzz.cmake)

# The jattn command under hostile input: every malformed class, exit code, one stderr line,
# nothing left behind.
if(TARGET jattn)
  add_test(NAME test_cli_hostile COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_hostile.sh $<TARGET_FILE:jattn>)
endif()
