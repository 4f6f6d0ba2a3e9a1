// The ping-sr connect private data: {uint64 count, uint64 data_size}, network byte order.
#include "PingSr.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using pingsr::ConnectInfo;
using pingsr::Limits;

TEST(PingSrPrivateData, EncodesBigEndian) {
  std::vector<uint8_t> wire = pingsr::encode({0x0102, 0x0a0b0c});
  ASSERT_EQ(wire.size(), 16u);
  EXPECT_EQ(wire[7], 0x02);
  EXPECT_EQ(wire[6], 0x01);
  EXPECT_EQ(wire[15], 0x0c);
  EXPECT_EQ(wire[13], 0x0a);
  EXPECT_EQ(wire[0], 0);
}

TEST(PingSrPrivateData, RoundTripsAndIgnoresTransportPadding) {
  std::vector<uint8_t> wire = pingsr::encode({1000, 4096});
  wire.resize(56, 0xee);  // InfiniBand/RoCE deliver 56 bytes; whatever follows our 16 is not ours
  ConnectInfo info;
  EXPECT_EQ(pingsr::parse(wire.data(), wire.size(), Limits{}, info), "");
  EXPECT_EQ(info.count, 1000u);
  EXPECT_EQ(info.dataSize, 4096u);
}

TEST(PingSrPrivateData, ShortDataIsRejectedWithItsLength) {
  std::vector<uint8_t> wire = pingsr::encode({1, 1});
  ConnectInfo info;
  std::string why = pingsr::parse(wire.data(), 15, Limits{}, info);
  EXPECT_NE(why.find("16 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("got 15"), std::string::npos) << why;
  EXPECT_FALSE(pingsr::parse(nullptr, 0, Limits{}, info).empty());
}

TEST(PingSrPrivateData, ZeroCountOrSizeIsRejected) {
  ConnectInfo info;
  auto zeroCount = pingsr::encode({0, 64});
  EXPECT_NE(pingsr::parse(zeroCount.data(), 16, Limits{}, info).find("count 0"), std::string::npos);
  auto zeroSize = pingsr::encode({5, 0});
  EXPECT_NE(pingsr::parse(zeroSize.data(), 16, Limits{}, info).find("data_size 0"), std::string::npos);
}

TEST(PingSrPrivateData, ACountOfZeroInPaddedDataSaysShortDataLooksTheSame) {
  // 4 bytes sent over RoCE arrive as 56, zero-padded: the reason names that possibility.
  std::vector<uint8_t> padded(56, 0);
  padded[8] = 1;  // a data_size byte: only the count is missing
  ConnectInfo info;
  const std::string why = pingsr::parse(padded.data(), padded.size(), Limits{}, info);
  EXPECT_NE(why.find("count 0"), std::string::npos) << why;
  EXPECT_NE(why.find("fewer than the 16 bytes"), std::string::npos) << why;
}

TEST(PingSrPrivateData, AbsurdCountOrSizeIsRejectedAgainstTheServersLimits) {
  ConnectInfo info;
  Limits limits{100, 1 << 20};
  auto hugeCount = pingsr::encode({~0ull, 64});
  EXPECT_NE(pingsr::parse(hugeCount.data(), 16, limits, info).find("over this server's limit of 100"), std::string::npos);
  auto hugeSize = pingsr::encode({1, 1ull << 40});
  EXPECT_NE(pingsr::parse(hugeSize.data(), 16, limits, info).find("over this server's limit"), std::string::npos);
  auto atLimits = pingsr::encode({100, 1 << 20});
  EXPECT_EQ(pingsr::parse(atLimits.data(), 16, limits, info), "");
}

}  // namespace
