# make install of libjattn_parallel (included by cmake/install.cmake): both libraries in their
# own export set (jattn::parallel, jattn::parallel_static, loaded by
# find_package(jattn COMPONENTS parallel), which then also finds MPI when it was built with it),
# pkg-config's jattn-parallel.pc, and its header jattn_parallel.h. Consumers of libjattn alone
# see none of it.
install(FILES include/jattn_parallel.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS jattn_parallel_shared jattn_parallel_static EXPORT jattnParallelTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT jattnParallelTargets NAMESPACE jattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/jattn)

# pkg-config: what a static link needs besides libjattn_parallel.a and libjattn's own.
set(JATTN_PARALLEL_PC_PRIVATE "-lm")
if(JATTN_MPI_ENABLED)
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND JATTN_PARALLEL_PC_PRIVATE " ${lib}")
  endforeach()
  if(MPI_C_LINK_FLAGS)
    string(APPEND JATTN_PARALLEL_PC_PRIVATE " ${MPI_C_LINK_FLAGS}")
  endif()
endif()
if(JATTN_NCCL_ENABLED)
  string(APPEND JATTN_PARALLEL_PC_PRIVATE " ${JATTN_NCCL_LIBRARY}")
endif()
if(JATTN_CUDA_ENABLED)
  string(APPEND JATTN_PARALLEL_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/jattn-parallel.pc.in ${CMAKE_CURRENT_BINARY_DIR}/jattn-parallel.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/jattn-parallel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
