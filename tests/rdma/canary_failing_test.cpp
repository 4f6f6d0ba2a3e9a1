// Deliberately failing, and only ever run by the testbed label's runner test: it proves that a test
// failing inside the guest turns the whole run red. It needs the device, so it runs where the rdma
// tests run.
#include <gtest/gtest.h>

#include "rdma/TestBed.h"

namespace {

TEST(Canary, FailsInsideTheTestBedOnPurpose) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  ADD_FAILURE() << "deliberate failure on " << bed.device << " (" << bed.ip << ")";
}

}  // namespace
