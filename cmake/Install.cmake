# Installs the library (shared, with its SOVERSION, and static), the public headers, a CMake
# package (find_package(evrdma CONFIG) -> evrdma::evrdma, evrdma::evrdma_static) and evrdma.pc.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EVRDMA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/evrdma)

install(TARGETS evrdma evrdma_static EXPORT evrdmaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY reactor/include/evrdma handlers/include/evrdma
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development)
install(EXPORT evrdmaTargets NAMESPACE evrdma:: DESTINATION ${EVRDMA_CMAKE_DIR} COMPONENT development)

configure_package_config_file(cmake/evrdmaConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/evrdmaConfig.cmake
  INSTALL_DESTINATION ${EVRDMA_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/evrdmaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/evrdmaConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/evrdmaConfigVersion.cmake
  cmake/Dependencies.cmake
  DESTINATION ${EVRDMA_CMAKE_DIR} COMPONENT development)

# Relocatable: the prefix is found from where the .pc file lies (cmake --install --prefix DIR works).
file(RELATIVE_PATH EVRDMA_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" EVRDMA_PC_TO_PREFIX "${EVRDMA_PC_TO_PREFIX}")
configure_file(cmake/evrdma.pc.in ${CMAKE_CURRENT_BINARY_DIR}/evrdma.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/evrdma.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
