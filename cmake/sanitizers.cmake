# Sanitizer and fuzzing builds, chosen by JATTN_SANITIZE and loaded through
# CMAKE_PROJECT_INCLUDE, so that no project file changes:
#
#   cmake -S . -B build-asan -DCMAKE_PROJECT_INCLUDE=$PWD/cmake/sanitizers.cmake -DJATTN_SANITIZE=address
#
#   address  AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer, any error fatal
#   thread   ThreadSanitizer (clang; OpenMP through LLVM's libomp, checked with its archer tool)
#   fuzzer   libFuzzer instrumentation + ASan + UBSan for every object (clang); the fuzz
#            harnesses (fuzz/fuzz.cmake) link libFuzzer's main
#
# cmake/sanitizer_tests.sh drives the three builds for `make test`.
set(JATTN_SANITIZE "" CACHE STRING "Sanitizer build: address, thread, fuzzer, or empty")
set_property(CACHE JATTN_SANITIZE PROPERTY STRINGS "" address thread fuzzer)

set(_jattn_san_common -g -fno-omit-frame-pointer)
if(JATTN_SANITIZE STREQUAL "address")
  set(_jattn_san_compile ${_jattn_san_common} -fsanitize=address,undefined -fno-sanitize-recover=all)
  set(_jattn_san_link -fsanitize=address,undefined)
elseif(JATTN_SANITIZE STREQUAL "thread")
  set(_jattn_san_compile ${_jattn_san_common} -fsanitize=thread)
  set(_jattn_san_link -fsanitize=thread)
elseif(JATTN_SANITIZE STREQUAL "fuzzer")
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "JATTN_SANITIZE=fuzzer needs clang (libFuzzer); CMAKE_C_COMPILER is ${CMAKE_C_COMPILER_ID}")
  endif()
  set(_jattn_san_compile ${_jattn_san_common} -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
  set(_jattn_san_link -fsanitize=address,undefined)
elseif(NOT JATTN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "JATTN_SANITIZE: '${JATTN_SANITIZE}' is not address, thread or fuzzer")
endif()

# GCC: -O1 and no variable tracking (placed after the build type's -O2, so they win). The cpu
# kernels are one template instantiated per instruction set into very long, fully unrolled
# functions; at -O2 -g with ASan + UBSan, GCC 12 spends about 9 minutes on cpu_kernels_generic.c
# alone (87% in var-tracking dataflow) and some 10 of the ASan step's 14 minutes in the build;
# at -O1 -fno-var-tracking the whole build takes about one. -O1 is the level the ASan
# documentation recommends; every load and store is still instrumented, and reports keep their
# file:line stacks (the line tables stay, only local variables' locations leave the debug info).
# Not for clang, whose ASan build is no faster at -O1.
if(_jattn_san_compile AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  list(APPEND _jattn_san_compile -O1 -fno-var-tracking)
endif()

if(_jattn_san_compile)
  message(STATUS "jattn: sanitizer build '${JATTN_SANITIZE}': ${_jattn_san_compile}")
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${_jattn_san_compile}>")
  add_link_options(${_jattn_san_link})
endif()
