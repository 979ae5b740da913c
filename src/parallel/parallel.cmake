# The sequence-parallel layer (jattn.h, "sequence parallel"): libjattn_parallel, shared and
# static (targets jattn_parallel_shared / jattn_parallel_static; installed as
# jattn::parallel / jattn::parallel_static, pkg-config jattn-parallel).
#
# A library of its own, not part of libjattn: it sits above include/jattn.h (it calls only the
# public API), and it is the only part that needs MPI and NCCL. Linked into libjattn, MPI
# would become a run-time dependency of every consumer (the Python package, the Rust crates,
# any C program that never shards a sequence), and find_package(jattn) would need an MPI
# installed; as a library of its own, only the programs that own a communicator link it,
# and they link MPI or NCCL already.
#
# Transports, found at configure time like the cuda backend (stubs report them missing):
#   JATTN_MPI=AUTO|ON|OFF   MPI (find_package(MPI COMPONENTS C)): host memory
#   JATTN_NCCL=AUTO|ON|OFF  NCCL, with the cuda backend: nccl.h and libnccl beside the CUDA
#                           toolkit, or under NCCL_ROOT (a cache variable or the environment;
#                           e.g. the nvidia-nccl-cu13 Python wheel's nvidia/nccl): device memory
# Sets JATTN_MPI_ENABLED and JATTN_NCCL_ENABLED (include()d: in the top directory's scope).
set(JATTN_MPI "AUTO" CACHE STRING "Build the MPI transport of libjattn_parallel: AUTO (when an MPI is found), ON or OFF")
set_property(CACHE JATTN_MPI PROPERTY STRINGS AUTO ON OFF)
set(JATTN_NCCL "AUTO" CACHE STRING "Build the NCCL transport of libjattn_parallel: AUTO (with CUDA, when NCCL is found), ON or OFF")
set_property(CACHE JATTN_NCCL PROPERTY STRINGS AUTO ON OFF)
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "Where to look for nccl.h (include/) and libnccl (lib/) besides the CUDA toolkit")

set(JATTN_MPI_ENABLED OFF)
if(NOT JATTN_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(JATTN_MPI_ENABLED ON)
    message(STATUS "jattn: the MPI transport of libjattn_parallel is built (${MPI_C_LIBRARIES})")
  elseif(JATTN_MPI STREQUAL "ON")
    message(FATAL_ERROR "JATTN_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  else()
    message(STATUS "jattn: no MPI found, the MPI transport of libjattn_parallel is not built")
  endif()
endif()

set(JATTN_NCCL_ENABLED OFF)
if(NOT JATTN_NCCL STREQUAL "OFF")
  if(JATTN_CUDA_ENABLED)
    find_path(JATTN_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(JATTN_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
      PATH_SUFFIXES lib lib64)
  endif()
  if(JATTN_CUDA_ENABLED AND JATTN_NCCL_INCLUDE_DIR AND JATTN_NCCL_LIBRARY)
    set(JATTN_NCCL_ENABLED ON)
    message(STATUS "jattn: the NCCL transport of libjattn_parallel is built (${JATTN_NCCL_LIBRARY})")
  elseif(JATTN_NCCL STREQUAL "ON")
    message(FATAL_ERROR "JATTN_NCCL=ON needs the cuda backend and nccl.h / libnccl (set NCCL_ROOT)")
  else()
    message(STATUS "jattn: the NCCL transport of libjattn_parallel is not built (needs CUDA, nccl.h and libnccl)")
  endif()
endif()

set(_sp ${CMAKE_CURRENT_LIST_DIR})
add_library(jattn_parallel_objects OBJECT
  ${_sp}/sp_api.c
  ${_sp}/sp_blocks.c
  ${_sp}/sp_plan.c
  ${_sp}/sp_agree.c
  ${_sp}/sp_ulysses.c
  ${_sp}/sp_ring.c
  ${_sp}/sp_data_host.c
  ${_sp}/sp_error.c)
target_include_directories(jattn_parallel_objects PRIVATE ${PROJECT_SOURCE_DIR}/include ${_sp})
target_compile_definitions(jattn_parallel_objects PRIVATE JATTN_BUILDING)
set(JATTN_PARALLEL_LINK_LIBS "")

if(JATTN_MPI_ENABLED)
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_mpi.c)
  target_link_libraries(jattn_parallel_objects PRIVATE MPI::MPI_C)
  list(APPEND JATTN_PARALLEL_LINK_LIBS MPI::MPI_C)
else()
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_mpi_none.c)
endif()

if(JATTN_CUDA_ENABLED)
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_device_cuda.c ${_sp}/sp_data_cuda.cu)
  target_link_libraries(jattn_parallel_objects PRIVATE CUDA::cudart)
  set_target_properties(jattn_parallel_objects PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
    CUDA_VISIBILITY_PRESET hidden)
  target_compile_options(jattn_parallel_objects PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:${JATTN_CUDA_GENCODE}>"
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-fno-threadsafe-statics>)
  list(APPEND JATTN_PARALLEL_LINK_LIBS CUDA::cudart)
else()
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_device_none.c)
endif()

if(JATTN_NCCL_ENABLED)
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_nccl.c)
  target_include_directories(jattn_parallel_objects PRIVATE ${JATTN_NCCL_INCLUDE_DIR})
  list(APPEND JATTN_PARALLEL_LINK_LIBS ${JATTN_NCCL_LIBRARY})
else()
  target_sources(jattn_parallel_objects PRIVATE ${_sp}/sp_nccl_none.c)
endif()

add_library(jattn_parallel_shared SHARED $<TARGET_OBJECTS:jattn_parallel_objects>)
add_library(jattn_parallel_static STATIC $<TARGET_OBJECTS:jattn_parallel_objects>)
target_link_libraries(jattn_parallel_shared PUBLIC jattn_shared PRIVATE ${JATTN_PARALLEL_LINK_LIBS} m)
target_link_libraries(jattn_parallel_static PUBLIC jattn_static PRIVATE ${JATTN_PARALLEL_LINK_LIBS} m)
foreach(t jattn_parallel_shared jattn_parallel_static)
  set_target_properties(${t} PROPERTIES OUTPUT_NAME jattn_parallel)
endforeach()
set_target_properties(jattn_parallel_shared PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME parallel)
set_target_properties(jattn_parallel_static PROPERTIES EXPORT_NAME parallel_static)
unset(_sp)
