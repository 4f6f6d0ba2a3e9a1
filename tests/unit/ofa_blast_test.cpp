// blast-sr-2 on the wire (demos/blast/OfaBlast.h), without a device: the connect private data
// both ways, what is refused and why, and when the server's acks are due.
#include "OfaBlast.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using blast::ofa::AckLedger;
using blast::ofa::Request;

TEST(OfaBlast, PrivateDataIsThreeBigEndianCountsAndRoCEPaddingIsIgnored) {
  const Request sent{100000, 65536, 30};
  std::vector<uint8_t> wire = blast::ofa::encode(sent);
  ASSERT_EQ(wire.size(), 24u);
  EXPECT_EQ(wire[7], 0xa0);  // 100000 = 0x186a0, big-endian
  EXPECT_EQ(wire[15], 0x00);
  EXPECT_EQ(wire[14], 0x00);
  EXPECT_EQ(wire[13], 0x01);
  EXPECT_EQ(wire[23], 30);
  wire.resize(56, 0);  // as RoCE delivers it
  Request got;
  EXPECT_EQ(blast::ofa::decode(wire.data(), wire.size(), blast::ofa::Limits{}, got), "");
  EXPECT_EQ(got.limit, sent.limit);
  EXPECT_EQ(got.dataSize, sent.dataSize);
  EXPECT_EQ(got.buffers, sent.buffers);
}

TEST(OfaBlast, ShortZeroOrOversizedRequestsAreRefusedSayingWhich) {
  Request got;
  const blast::ofa::Limits limits{1000, 4096, 16};
  std::vector<uint8_t> shortData(16, 1);
  EXPECT_NE(blast::ofa::decode(shortData.data(), shortData.size(), limits, got).find("16 bytes of private data"),
            std::string::npos);
  auto zeroLimit = blast::ofa::encode(Request{0, 64, 4});
  EXPECT_NE(blast::ofa::decode(zeroLimit.data(), zeroLimit.size(), limits, got).find("limit 0"), std::string::npos);
  auto big = blast::ofa::encode(Request{10, 8192, 4});
  EXPECT_NE(blast::ofa::decode(big.data(), big.size(), limits, got).find("data_size 8192"), std::string::npos);
  auto many = blast::ofa::encode(Request{10, 64, 17});
  EXPECT_NE(blast::ofa::decode(many.data(), many.size(), limits, got).find("n_data_buffers 17"), std::string::npos);
}

TEST(OfaBlast, AcksGoAtTheThresholdAndWhatWouldLicenseNothingMoreWaitsForTheFinalAck) {
  AckLedger ledger(Request{20, 64, 9});  // threshold 3
  ledger.onReceived();
  ledger.onReceived();
  EXPECT_EQ(ledger.due(), 0u);
  ledger.onReceived();
  ASSERT_EQ(ledger.due(), 3u);
  ledger.onAckPosted(3);  // the client may send up to 12
  for (int i = 0; i < 6; ++i) ledger.onReceived();
  ASSERT_EQ(ledger.due(), 6u) << "what piled up goes in one ack";
  ledger.onAckPosted(6);  // up to 18
  for (int i = 0; i < 3; ++i) ledger.onReceived();
  ASSERT_EQ(ledger.due(), 3u);
  ledger.onAckPosted(3);  // up to 21: the client has credits to the end
  for (int i = 0; i < 7; ++i) ledger.onReceived();
  EXPECT_EQ(ledger.due(), 0u) << "an ack now would license nothing: it could never be seen read";
  ledger.onReceived();  // the 20th
  EXPECT_EQ(ledger.unread(), 0u) << "every earlier ack's licensed message arrived";
  ASSERT_EQ(ledger.due(), 8u) << "the final ack, with the rest";
  ledger.onAckPosted(8);
  EXPECT_FALSE(ledger.allAcked()) << "its send has not completed";
  for (int i = 0; i < 4; ++i) ledger.onAckDone();
  EXPECT_TRUE(ledger.allAcked());
}

TEST(OfaBlast, AnAckCountsAsReadOnlyOnceAMessageOnlyItsCreditsAllowedArrivesNotWhenItsSendCompletes) {
  AckLedger ledger(Request{100, 64, 3});  // threshold 1: the client may send 3, then what acks add
  for (int i = 0; i < 3; ++i) {
    ledger.onReceived();
    ASSERT_EQ(ledger.due(), 1u);
    ledger.onAckPosted(1);  // licenses message 4, then 5, then 6
    ledger.onAckDone();     // its send completed: on iWARP that proves nothing about the client
  }
  EXPECT_EQ(ledger.unread(), 3u);
  EXPECT_EQ(ledger.due(), 0u);
  ledger.onReceived();  // message 4: only the first ack allowed it, so the client read that one
  EXPECT_EQ(ledger.unread(), 2u);
  EXPECT_EQ(ledger.due(), 1u);
}

TEST(OfaBlast, AnAckCountingMoreThanIsUnacknowledgedIsMalformedEvenWhenTheSumWouldWrapAround) {
  uint8_t ack[8] = {0, 0, 0, 0, 0, 0, 0, 5};
  uint64_t count = 0;
  EXPECT_EQ(blast::ofa::readAck(ack, 8, 5, count), "");
  EXPECT_EQ(count, 5u);
  EXPECT_EQ(blast::ofa::readAck(ack, 8, 4, count), "malformed ack: 8 bytes, count 5 with 4 messages unacknowledged");
  EXPECT_NE(blast::ofa::readAck(ack, 7, 5, count), "");
  const uint8_t zero[8] = {};
  EXPECT_NE(blast::ofa::readAck(zero, 8, 5, count), "");
  // acked + count would wrap to below sent: the check must not add.
  const uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_NE(blast::ofa::readAck(huge, 8, 5, count), "");
}

}  // namespace
