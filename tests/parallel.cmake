# Tests of the sequence-parallel layer, libjattn_parallel (included by tests/CMakeLists.txt).
#
#   test_sp_threads   every rank's steps in one process, P = 1, 2, 3, 4, 8 threads, host memory: both
#                     algorithms, every case of sp_cases.c, and the agreement on errors
#   test_sp_device    the same on one GPU with device memory (each rank a stream): the ring merge
#                     and the Ulysses re-layouts in device memory; skipped without a GPU
#   test_sp_mpi_<P>   mpirun -np P (2, 3, 4; oversubscribed on small machines) of test_sp_mpi: the
#                     MPI transport for real, every case and every error
#   test_cli_parallel mpirun of `jattn run --parallel ...`
# The MPI tests are registered when the MPI transport is built; not under ThreadSanitizer (Open
# MPI is not instrumented, and its shared-memory transport's lock-free queues read as races).
find_package(Threads REQUIRED)
add_library(jattn_sp_test_support STATIC ${CMAKE_CURRENT_LIST_DIR}/sp_cases.c ${CMAKE_CURRENT_LIST_DIR}/sp_threads_transport.c)
target_include_directories(jattn_sp_test_support PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(jattn_sp_test_support PUBLIC jattn_test_harness jattn_internal jattn_parallel_static
                                                   Threads::Threads)
target_compile_definitions(jattn_sp_test_support PRIVATE _POSIX_C_SOURCE=200809L) # pthread barriers

jattn_add_test(test_sp_threads SOURCES test_sp_threads.c LIBS jattn_sp_test_support)
set_tests_properties(test_sp_threads PROPERTIES TIMEOUT 300)
if(JATTN_CUDA_ENABLED)
  jattn_add_test(test_sp_device SOURCES test_sp_device.c LIBS jattn_sp_test_support CUDA::cudart)
  set_tests_properties(test_sp_device PROPERTIES TIMEOUT 600)
endif()

if(JATTN_MPI_ENABLED AND NOT JATTN_SANITIZE STREQUAL "thread")
  # Open MPI refuses to start as root and more ranks than cores unless told; its flags are its
  # own, so they are passed only to an Open MPI mpiexec.
  set(JATTN_MPIEXEC_FLAGS ${MPIEXEC_PREFLAGS})
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _jattn_mpiexec_version ERROR_QUIET)
  if(_jattn_mpiexec_version MATCHES "Open MPI|OpenRTE")
    list(APPEND JATTN_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root)
  endif()
  set(JATTN_MPIEXEC_FLAGS ${JATTN_MPIEXEC_FLAGS} CACHE INTERNAL "flags of mpiexec for the tests")
  # LeakSanitizer: Open MPI keeps what MPI_Init allocates until the process ends.
  # (fast_unwind_on_malloc=0: the stacks reach into libmpi, whose frames the suppressions name)
  set(JATTN_MPI_TEST_ENV
    "LSAN_OPTIONS=fast_unwind_on_malloc=0:suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan_mpi.supp:print_suppressions=0")

  add_executable(test_sp_mpi ${CMAKE_CURRENT_LIST_DIR}/test_sp_mpi.c)
  target_link_libraries(test_sp_mpi PRIVATE jattn_sp_test_support MPI::MPI_C)
  foreach(p 2 3 4)
    add_test(NAME test_sp_mpi_${p} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${p} ${JATTN_MPIEXEC_FLAGS}
      $<TARGET_FILE:test_sp_mpi> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(test_sp_mpi_${p} PROPERTIES TIMEOUT 300 PROCESSORS ${p} ENVIRONMENT "${JATTN_MPI_TEST_ENV}")
  endforeach()
elseif(JATTN_MPI_ENABLED)
  message(STATUS "jattn: the MPI tests are not registered under ThreadSanitizer (Open MPI is not instrumented)")
endif()

# The command end to end: with mpiexec when the MPI transport is built, else its one-line refusal.
if(TARGET jattn AND NOT JATTN_SANITIZE STREQUAL "thread")
  if(JATTN_MPI_ENABLED)
    add_test(NAME test_cli_parallel COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_cli_parallel.sh $<TARGET_FILE:jattn>
      ${MPIEXEC_EXECUTABLE} ${JATTN_MPIEXEC_FLAGS})
    set_tests_properties(test_cli_parallel PROPERTIES TIMEOUT 300 PROCESSORS 4 ENVIRONMENT "${JATTN_MPI_TEST_ENV}")
  else()
    add_test(NAME test_cli_parallel COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_cli_parallel.sh $<TARGET_FILE:jattn>)
  endif()
endif()

# An installed libjattn_parallel, consumed through pkg-config and find_package (plain builds
# only: a consumer built with plain flags cannot link instrumented libraries).
if(JATTN_MPI_ENABLED AND NOT JATTN_SANITIZE AND MPI_C_COMPILER)
  add_test(NAME test_install_parallel COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_install_parallel.sh ${PROJECT_BINARY_DIR}
    ${CMAKE_CURRENT_LIST_DIR}/install_consumer_parallel ${MPI_C_COMPILER} ${CMAKE_COMMAND} ${MPIEXEC_EXECUTABLE}
    ${JATTN_MPIEXEC_FLAGS})
  set_tests_properties(test_install_parallel PROPERTIES TIMEOUT 300 PROCESSORS 2)
endif()
include(${PROJECT_SOURCE_DIR}/bench/parallel/bench.cmake) # sp_gpu_bench: compiled, run by bench/parallel/multi_gpu.sh
