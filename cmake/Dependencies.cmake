# evrdma's dependencies, as imported targets of their own names (PkgConfig::EVRDMA_*) so they never
# clash with a consumer's. Used by the build and, installed, by evrdmaConfig.cmake.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::EVRDMA_LIBEVENT)
  pkg_check_modules(EVRDMA_LIBEVENT REQUIRED IMPORTED_TARGET libevent_core)
endif()
if(NOT TARGET PkgConfig::EVRDMA_IBVERBS)
  pkg_check_modules(EVRDMA_IBVERBS REQUIRED IMPORTED_TARGET libibverbs)
endif()
if(NOT TARGET PkgConfig::EVRDMA_RDMACM)
  pkg_check_modules(EVRDMA_RDMACM REQUIRED IMPORTED_TARGET librdmacm)
endif()
