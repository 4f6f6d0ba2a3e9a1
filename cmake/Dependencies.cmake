# evrdma's dependencies, as imported targets of their own names (PkgConfig::EVRDMA_*) so they never
# clash with a consumer's. Used by the build and, installed, by evrdmaConfig.cmake.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::EVRDMA_LIBEVENT)
  pkg_check_modules(EVRDMA_LIBEVENT REQUIRED IMPORTED_TARGET libevent_core)
endif()
# evdns, for connecting a stream by host name without blocking the loop.
if(NOT TARGET PkgConfig::EVRDMA_LIBEVENT_EXTRA)
  pkg_check_modules(EVRDMA_LIBEVENT_EXTRA REQUIRED IMPORTED_TARGET libevent_extra)
endif()
if(NOT TARGET PkgConfig::EVRDMA_IBVERBS)
  pkg_check_modules(EVRDMA_IBVERBS REQUIRED IMPORTED_TARGET libibverbs)
endif()
if(NOT TARGET PkgConfig::EVRDMA_RDMACM)
  pkg_check_modules(EVRDMA_RDMACM REQUIRED IMPORTED_TARGET librdmacm)
endif()
