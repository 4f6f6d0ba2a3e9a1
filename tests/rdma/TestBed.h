// What tools/rdma-run tells a test about the RDMA device it may use. A test that needs a device and
// finds none fails: it never skips, because a skipped RDMA test proves nothing.
#pragma once

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace evrdma::test {

struct TestBed {
  std::string device;  // e.g. rxe0
  std::string ip;      // an IPv4 address on the device's netdev
};

inline ::testing::AssertionResult loadTestBed(TestBed& bed) {
  const char* device = std::getenv("EVRDMA_RDMA_DEV");
  const char* ip = std::getenv("EVRDMA_RDMA_IP");
  if (device == nullptr || ip == nullptr || *device == '\0' || *ip == '\0') {
    return ::testing::AssertionFailure()
           << "EVRDMA_RDMA_DEV / EVRDMA_RDMA_IP are not set: run RDMA tests through tools/rdma-run "
              "(e.g. tools/rdma-run -- ctest --test-dir build -L rdma)";
  }
  bed.device = device;
  bed.ip = ip;
  return ::testing::AssertionSuccess();
}

// The test bed's device speaks iWARP (siw, or an iWARP NIC): its transport differs where a test's
// expectations must (queue pairs per process, who completes a connection, how a stalled peer ends).
// The device named by EVRDMA_RDMA_DEV says so itself; tools/rdma-run's EVRDMA_RDMA_DRIVER is the
// fallback when that device cannot be found.
inline bool onIwarp() {
  static const bool iwarp = [] {
    const char* name = std::getenv("EVRDMA_RDMA_DEV");
    int found = -1;
    int count = 0;
    if (ibv_device** devices = name != nullptr ? ibv_get_device_list(&count) : nullptr) {
      for (int i = 0; i < count && found < 0; ++i)
        if (std::strcmp(ibv_get_device_name(devices[i]), name) == 0)
          found = devices[i]->transport_type == IBV_TRANSPORT_IWARP;
      ibv_free_device_list(devices);
    }
    if (found >= 0) return found == 1;
    const char* driver = std::getenv("EVRDMA_RDMA_DRIVER");
    return driver != nullptr && std::string(driver) == "siw";
  }();
  return iwarp;
}

// EVRDMA_STRESS=light: set by the sanitizer and valgrind stages, which look for memory errors, not
// rare races, and run many times slower; stress tests take fewer rounds or longer waits there.
inline bool lightStress() {
  const char* stress = std::getenv("EVRDMA_STRESS");
  return stress != nullptr && std::string(stress) == "light";
}

}  // namespace evrdma::test
