// What tools/rdma-run tells a test about the RDMA device it may use. A test that needs a device and
// finds none fails: it never skips, because a skipped RDMA test proves nothing.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
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

// The test bed's device is soft-iWARP (siw): its transport differs where a test's expectations must
// (queue pairs per process, who completes a connection, how a stalled peer ends).
inline bool onIwarp() {
  const char* driver = std::getenv("EVRDMA_RDMA_DRIVER");
  return driver != nullptr && std::string(driver) == "siw";
}

// EVRDMA_STRESS=light: set by the sanitizer and valgrind stages, which look for memory errors, not
// rare races, and run many times slower; stress tests take fewer rounds or longer waits there.
inline bool lightStress() {
  const char* stress = std::getenv("EVRDMA_STRESS");
  return stress != nullptr && std::string(stress) == "light";
}

}  // namespace evrdma::test
