# The backends' names at configure time, for the tests that run once per backend: read from
# src/backend.h's JATTN_BACKENDS list (one `X(ENUM_SUFFIX, name)` line per backend, in AUTO's
# order), the list the library's jattn_backend_name() and jattn_backend_info_at() derive from,
# so that no CMake file restates it. Editing backend.h re-runs the configuration.
function(jattn_backend_names out_var)
  set(header ${PROJECT_SOURCE_DIR}/src/backend.h)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${header})
  file(READ ${header} text)
  string(REGEX MATCHALL "\n +X\\([A-Z0-9_]+, [a-z0-9_]+\\)" entries "${text}")
  set(names)
  foreach(entry IN LISTS entries)
    string(REGEX REPLACE ".*X\\([A-Z0-9_]+, ([a-z0-9_]+)\\)" "\\1" name "${entry}")
    list(APPEND names ${name})
  endforeach()
  if(NOT names)
    message(FATAL_ERROR "cmake/backends.cmake: no X(ENUM_SUFFIX, name) line found in ${header}")
  endif()
  set(${out_var} ${names} PARENT_SCOPE)
endfunction()
