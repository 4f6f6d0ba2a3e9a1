// The one wr_id layout: what goes in comes out, and a send never looks like a receive.
#include "WorkRequestId.h"

#include <gtest/gtest.h>

namespace wrid = evrdma::detail::wrid;

TEST(WorkRequestId, AReceiveCarriesItsSerialAndSlot) {
  const uint64_t id = wrid::receive(12345, 77);
  EXPECT_FALSE(wrid::isSend(id));
  EXPECT_EQ(wrid::serial(id), 12345u);
  EXPECT_EQ(wrid::index(id), 77u);
}

TEST(WorkRequestId, ASendCarriesItsSerialAndSequenceAndTheSendFlag) {
  const uint64_t id = wrid::send(wrid::kSerialMask, 0xffffffffu);
  EXPECT_TRUE(wrid::isSend(id));
  EXPECT_EQ(wrid::serial(id), wrid::kSerialMask) << "the largest serial must not reach the send flag";
  EXPECT_EQ(wrid::index(id), 0xffffffffu);
}

TEST(WorkRequestId, SerialsOfAReceiveAndASendOfTheSameQueuePairAgree) {
  for (uint32_t serial : {1u, 2u, 0x40000000u, wrid::kSerialMask}) {
    EXPECT_EQ(wrid::serial(wrid::receive(serial, 5)), wrid::serial(wrid::send(serial, 5)));
    EXPECT_NE(wrid::receive(serial, 5), wrid::send(serial, 5));
  }
}

TEST(WorkRequestId, ASerialOutsideTheMaskCannotSetTheSendFlag) {
  EXPECT_FALSE(wrid::isSend(wrid::receive(0xffffffffu, 0)));
}
