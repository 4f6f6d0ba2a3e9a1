# Debian packages (make deb): libevrdma (the shared library) and libevrdma-dev (headers, the
# static library, the CMake package, evrdma.pc), from the install rules' two components.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME evrdma)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "evrdma developers <evrdma@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libevrdma)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)  # libevent-core, libibverbs1, librdmacm1, libstdc++
set(CPACK_DEBIAN_RUNTIME_PACKAGE_GENERATE_SHLIBS ON)  # a shlibs file, and ldconfig runs on install
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "evrdma: event-driven, single-threaded RDMA on libevent (shared library)")

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libevrdma-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
    "libevrdma (= ${PROJECT_VERSION}), libevent-dev, libibverbs-dev, librdmacm-dev, pkgconf | pkg-config")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION
    "evrdma: event-driven, single-threaded RDMA on libevent (headers, static library, CMake package, pkg-config)")

include(CPack)
