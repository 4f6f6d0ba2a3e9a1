// Private data: each transport's limit, a reject reason through padded, cut, foreign and truncated
// bytes, and numeric address parsing.
#include "evrdma/PrivateData.h"

#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "evrdma/Address.h"

namespace {

using evrdma::decodeRejectReason;
using evrdma::encodeRejectReason;
using evrdma::maxPrivateData;
using evrdma::PrivateDataUse;

TEST(PrivateDataLimits, FollowTheTransport) {
  EXPECT_EQ(maxPrivateData(IBV_TRANSPORT_IB, PrivateDataUse::Connect), 56u);
  EXPECT_EQ(maxPrivateData(IBV_TRANSPORT_IB, PrivateDataUse::Accept), 196u);
  EXPECT_EQ(maxPrivateData(IBV_TRANSPORT_IB, PrivateDataUse::Reject), 148u);
  // MPA allows 512, but librdmacm's private_data_len is a uint8_t, and MPA v2 counts its 4-byte header in it.
  EXPECT_EQ(maxPrivateData(IBV_TRANSPORT_IWARP, PrivateDataUse::Connect), 251u);
  EXPECT_EQ(maxPrivateData(static_cast<const rdma_cm_id*>(nullptr), PrivateDataUse::Connect), 56u);
}

TEST(RejectReason, RoundTripsThroughPaddedPrivateData) {
  std::vector<uint8_t> wire = encodeRejectReason("count 0 is not allowed");
  wire.resize(148, 0);  // what InfiniBand delivers: the whole reject private data
  std::string reason;
  ASSERT_TRUE(decodeRejectReason(wire.data(), wire.size(), reason));
  EXPECT_EQ(reason, "count 0 is not allowed");
}

TEST(RejectReason, LongReasonIsCutToFitTheSmallestTransport) {
  std::vector<uint8_t> wire = encodeRejectReason(std::string(500, 'x'));
  EXPECT_LE(wire.size(), 148u);
  std::string reason;
  ASSERT_TRUE(decodeRejectReason(wire.data(), wire.size(), reason));
  EXPECT_EQ(reason.size(), evrdma::kMaxRejectReason);
}

TEST(RejectReason, ForeignOrTruncatedBytesAreNotAReason) {
  std::string reason;
  std::vector<uint8_t> foreign(148, 0);
  EXPECT_FALSE(decodeRejectReason(foreign.data(), foreign.size(), reason));
  std::vector<uint8_t> wire = encodeRejectReason("too big");
  EXPECT_FALSE(decodeRejectReason(wire.data(), wire.size() - 1, reason));  // text cut short
  EXPECT_FALSE(decodeRejectReason(wire.data(), 3, reason));
  EXPECT_FALSE(decodeRejectReason(nullptr, 0, reason));
}

TEST(Address, ParsesNumericIpv4AndIpv6Only) {
  sockaddr_storage out{};
  EXPECT_EQ(evrdma::parseAddress("192.0.2.1", 12321, out), 0);
  EXPECT_EQ(evrdma::formatAddress(reinterpret_cast<sockaddr*>(&out)), "192.0.2.1:12321");
  EXPECT_EQ(evrdma::parseAddress("fe80::1", 7, out), 0);
  EXPECT_EQ(evrdma::formatAddress(reinterpret_cast<sockaddr*>(&out)), "[fe80::1]:7");
  EXPECT_EQ(evrdma::parseAddress("localhost", 1, out), -EINVAL);  // a name would need a blocking lookup
  EXPECT_EQ(evrdma::parseAddress("", 1, out), -EINVAL);
  EXPECT_EQ(evrdma::parseAddress("300.1.1.1", 1, out), -EINVAL);
}

}  // namespace
