# make install: the header, libjattn.so and libjattn.a, the jattn command, a pkg-config file
# and a CMake package (find_package(jattn) -> jattn::jattn, jattn::jattn_static).
include(CMakePackageConfigHelpers)

install(FILES include/jattn.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS jattn_shared jattn_static EXPORT jattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT jattnTargets NAMESPACE jattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/jattn)

set(JATTN_CONFIG_NEEDS_OPENMP ${OpenMP_C_FOUND})
set(JATTN_CONFIG_NEEDS_CUDA ${JATTN_CUDA_ENABLED})
configure_package_config_file(cmake/jattnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/jattnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/jattn)
# Every 0.y release so far only adds to the API (0.2: key padding), so a request for an older
# 0.y is met; a change that breaks a caller bumps the major version.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/jattnConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/jattnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/jattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/jattn)

# pkg-config: private libraries are what a static link needs besides libjattn.a.
set(JATTN_PC_PRIVATE "-lm")
if(OpenMP_C_FOUND)
  string(APPEND JATTN_PC_PRIVATE " ${OpenMP_C_FLAGS}")
endif()
if(JATTN_CUDA_ENABLED)
  string(APPEND JATTN_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
# The prefix is found relative to the .pc file itself (${pcfiledir}), so the file is right for
# any `cmake --install --prefix`, DESTDIR or relocated copy, not only for CMAKE_INSTALL_PREFIX.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(JATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH JATTN_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" JATTN_PC_UP "${JATTN_PC_UP}")
  set(JATTN_PC_PREFIX "\${pcfiledir}/${JATTN_PC_UP}")
endif()
configure_file(cmake/jattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/jattn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/jattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
include(${CMAKE_CURRENT_LIST_DIR}/install_parallel.cmake) # libjattn_parallel
