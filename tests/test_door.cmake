# test_door: the tests and benchmarks reach inside the library only through the internal door,
# src/internal/jattn_internal.h (CONTRIBUTING.md, "The internal door"):
#   - every #include "..." of a C, C++ or CUDA file under tests/ and bench/ (bench/results aside)
#     names a header beside the file, of tests/ (the harness), of kit/ (the measurement kit), of
#     include/ (the public API), or the door itself, and never climbs out of a folder ("../");
#   - no CMake file there puts a folder of src/ or tools/ on an include path (the CMake target
#     jattn_internal carries the door's folder).
# Then the same rules run on two made-up lines that break them: each must be caught, so this test is
# known to notice. Fails naming each include or CMake line that breaks a rule.
# Usage: cmake -DROOT=<source dir> -P test_door.cmake
cmake_minimum_required(VERSION 3.18)
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "test_door: -DROOT=<source dir> is required")
endif()

# door_include_problem(<out> <file's folder> <included name>): sets <out> to why the include is not
# allowed, or "" when it is.
function(door_include_problem out dir name)
  set(why "")
  if(name MATCHES "\\.\\./")
    set(why "climbs out of its folder")
  elseif(name STREQUAL "jattn_internal.h")
    set(why "")
  elseif(EXISTS "${dir}/${name}" OR EXISTS "${ROOT}/tests/${name}" OR EXISTS "${ROOT}/kit/${name}"
         OR EXISTS "${ROOT}/include/${name}")
    set(why "")
  else()
    set(why "is not beside it, in tests/, kit/ or include/, nor the door (src/internal/jattn_internal.h)")
  endif()
  set(${out} "${why}" PARENT_SCOPE)
endfunction()

# cmake_line_problem(<out> <text>): "" or why a CMake text puts src/ or tools/ on an include path.
function(cmake_line_problem out text)
  set(why "")
  string(REGEX MATCHALL "include_directories\\([^)]*\\)" _calls "${text}")
  foreach(call ${_calls})
    if(call MATCHES "(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR)}/(\\.\\./)?(src|tools)[/ )]"
       OR call MATCHES "(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)}/(src|tools)$")
      set(why "puts a folder of src/ or tools/ on an include path: ${call}")
    endif()
  endforeach()
  set(${out} "${why}" PARENT_SCOPE)
endfunction()

set(_problems "")
set(_n 0)
file(GLOB_RECURSE _sources "${ROOT}/tests/*.c" "${ROOT}/tests/*.h" "${ROOT}/tests/*.cpp" "${ROOT}/tests/*.cu"
     "${ROOT}/bench/*.c" "${ROOT}/bench/*.h" "${ROOT}/bench/*.cpp" "${ROOT}/bench/*.cu" "${ROOT}/bench/*.cuh")
foreach(f ${_sources})
  if(f MATCHES "/bench/results/")
    continue()
  endif()
  get_filename_component(_dir "${f}" DIRECTORY)
  file(STRINGS "${f}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${_lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" _name "${line}")
    math(EXPR _n "${_n} + 1")
    door_include_problem(_why "${_dir}" "${_name}")
    if(_why)
      file(RELATIVE_PATH _rel "${ROOT}" "${f}")
      list(APPEND _problems "${_rel}: #include \"${_name}\" ${_why}")
    endif()
  endforeach()
endforeach()

file(GLOB_RECURSE _cmake "${ROOT}/tests/*.cmake" "${ROOT}/tests/CMakeLists.txt" "${ROOT}/bench/*.cmake"
     "${ROOT}/bench/CMakeLists.txt")
foreach(f ${_cmake})
  if(f MATCHES "test_door\\.cmake$")
    continue()
  endif()
  file(READ "${f}" _text)
  cmake_line_problem(_why "${_text}")
  if(_why)
    file(RELATIVE_PATH _rel "${ROOT}" "${f}")
    list(APPEND _problems "${_rel}: ${_why}")
  endif()
endforeach()

# The rules must catch what they look for.
door_include_problem(_why "${ROOT}/tests" "cuda/cuda_internal.h")
if(NOT _why)
  list(APPEND _problems "the check does not notice #include \"cuda/cuda_internal.h\" in tests/")
endif()
door_include_problem(_why "${ROOT}/bench/parallel" "cli_args.h")
if(NOT _why)
  list(APPEND _problems "the check does not notice #include \"cli_args.h\" (tools/) in bench/parallel/")
endif()
cmake_line_problem(_why "target_include_directories(x PRIVATE \${PROJECT_SOURCE_DIR}/src)")
if(NOT _why)
  list(APPEND _problems "the check does not notice an include path of src/ in a CMake file")
endif()

if(_problems)
  foreach(p ${_problems})
    message(STATUS "FAIL ${p}")
  endforeach()
  message(FATAL_ERROR "test_door: a test or benchmark reaches inside the library past the door")
endif()
message(STATUS "ok   test_door: ${_n} includes under tests/ and bench/, each beside its file, of tests/, kit/, "
               "include/ or the door; no CMake include path into src/ or tools/")
