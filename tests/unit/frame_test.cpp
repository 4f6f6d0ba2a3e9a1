// Frames: evrdma's own message header. What a peer sends is parsed and checked before use.
#include "Frame.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

namespace {

using evrdma::Frame;
using evrdma::FrameType;

int parse(const std::vector<uint8_t>& bytes, Frame& frame, std::string* reason = nullptr) {
  const char* why = "";
  int rc = evrdma::parseFrame(bytes.data(), bytes.size(), frame, why);
  if (reason) *reason = why;
  return rc;
}

TEST(Frame, DataCarriesItsBytesAndCredits) {
  std::string text = "hello";
  auto wire = evrdma::dataFrame(text.data(), text.size(), 7);
  ASSERT_EQ(wire.size(), Frame::kHeaderSize + text.size());
  Frame f;
  ASSERT_EQ(parse(wire, f), 0);
  EXPECT_EQ(f.type, FrameType::Data);
  EXPECT_EQ(f.credits, 7);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.payload), f.payloadLength), "hello");
}

TEST(Frame, EmptyDataAndCreditOnlyFramesAreValid) {
  Frame f;
  EXPECT_EQ(parse(evrdma::dataFrame(nullptr, 0, 0), f), 0);
  EXPECT_EQ(f.payloadLength, 0u);
  ASSERT_EQ(parse(evrdma::creditFrame(65535), f), 0);
  EXPECT_EQ(f.type, FrameType::Credit);
  EXPECT_EQ(f.credits, 65535);
}

TEST(Frame, HelloCarriesTheLargestMessageAndCreditsAndRefusesZero) {
  Frame f;
  ASSERT_EQ(parse(evrdma::helloFrame(uint64_t{1} << 30, 15), f), 0);
  EXPECT_EQ(f.type, FrameType::Hello);
  EXPECT_EQ(f.maxMessageSize, uint64_t{1} << 30);
  EXPECT_EQ(f.credits, 15);
  EXPECT_NE(parse(evrdma::helloFrame(0, 1), f), 0);
  auto cut = evrdma::helloFrame(64, 1);
  cut.pop_back();
  EXPECT_NE(parse(cut, f), 0);
}

TEST(Frame, RegionRequestGrantOfferReleaseAndRefusalRoundTrip) {
  Frame f;
  ASSERT_EQ(parse(evrdma::regionRequestFrame(42, 1 << 20, evrdma::kRemoteWrite, 1), f), 0);
  EXPECT_EQ(f.type, FrameType::RegionRequest);
  EXPECT_EQ(f.requestId, 42u);
  EXPECT_EQ(f.requestBytes, 1u << 20);
  EXPECT_EQ(f.requestAccess, static_cast<uint32_t>(evrdma::kRemoteWrite));

  evrdma::RemoteRegion r;
  r.address = 0x10000;
  r.length = 4096;
  r.rkey = 99;
  r.access = evrdma::kRemoteRead;
  ASSERT_EQ(parse(evrdma::regionGrantFrame(42, r, 0), f), 0);
  EXPECT_EQ(f.requestId, 42u);
  EXPECT_EQ(f.region.rkey, 99u);
  EXPECT_EQ(f.region.length, 4096u);

  ASSERT_EQ(parse(evrdma::regionOfferFrame(r, 5, 0), f), 0);
  EXPECT_EQ(f.type, FrameType::RegionOffer);
  EXPECT_EQ(f.tag, 5u);
  EXPECT_EQ(f.region.address, 0x10000u);

  ASSERT_EQ(parse(evrdma::regionReleaseFrame(99, 0x10000, 0), f), 0);
  EXPECT_EQ(f.releaseRkey, 99u);
  EXPECT_EQ(f.releaseAddress, 0x10000u);

  ASSERT_EQ(parse(evrdma::regionRefusedFrame(42, ENOMEM, 0), f), 0);
  EXPECT_EQ(f.error, static_cast<uint32_t>(ENOMEM));
}

TEST(Frame, MalformedFramesAreRefusedWithAReason) {
  Frame f;
  std::string why;
  EXPECT_EQ(parse(std::vector<uint8_t>(Frame::kHeaderSize - 1, 0), f, &why), -EPROTO);
  EXPECT_NE(why.find("shorter"), std::string::npos);

  auto wrongVersion = evrdma::creditFrame(0);
  wrongVersion[0] = 9;
  EXPECT_EQ(parse(wrongVersion, f, &why), -EPROTO);
  EXPECT_NE(why.find("version"), std::string::npos);

  auto unknownType = evrdma::creditFrame(0);
  unknownType[1] = 0x3f;  // the type bits past the last type (the top two are the ask and answer bits)
  EXPECT_EQ(parse(unknownType, f, &why), -EPROTO);

  auto askOnData = evrdma::dataFrame("ab", 2, 0);
  askOnData[1] |= evrdma::Frame::kAskBit;
  EXPECT_EQ(parse(askOnData, f, &why), -EPROTO) << "only a credit-only frame asks for credits";

  auto truncated = evrdma::dataFrame("abcdef", 6, 0);
  truncated.pop_back();  // the header still says 6 bytes
  EXPECT_EQ(parse(truncated, f, &why), -EPROTO);
  EXPECT_NE(why.find("disagrees"), std::string::npos);

  auto padded = evrdma::creditFrame(0);
  padded.push_back(0);  // a credit frame has no payload
  EXPECT_EQ(parse(padded, f, &why), -EPROTO);

  EXPECT_EQ(parse(evrdma::regionRequestFrame(1, 0, evrdma::kRemoteRead, 0), f, &why), -EPROTO) << "0 bytes";
  EXPECT_EQ(parse(evrdma::regionRequestFrame(1, 64, 0, 0), f, &why), -EPROTO) << "no access";
  EXPECT_EQ(parse(evrdma::regionRequestFrame(1, 64, 0x80000000u, 0), f, &why), -EPROTO) << "unknown access";

  evrdma::RemoteRegion wrapping;
  wrapping.address = UINT64_MAX - 1;
  wrapping.length = 16;
  wrapping.access = evrdma::kRemoteRead;
  EXPECT_EQ(parse(evrdma::regionGrantFrame(1, wrapping, 0), f, &why), -EPROTO);
  EXPECT_NE(why.find("malformed region"), std::string::npos);
}

TEST(Frame, KeepaliveProbesAndRepliesCarryCreditsAndNoPayload) {
  Frame f;
  ASSERT_EQ(parse(evrdma::keepaliveFrame(FrameType::KeepaliveProbe, 3), f), 0);
  EXPECT_EQ(f.type, FrameType::KeepaliveProbe);
  EXPECT_EQ(f.credits, 3);
  ASSERT_EQ(parse(evrdma::keepaliveFrame(FrameType::KeepaliveReply, 0), f), 0);
  EXPECT_EQ(f.type, FrameType::KeepaliveReply);
  std::string why;
  auto padded = evrdma::keepaliveFrame(FrameType::KeepaliveProbe, 0);
  padded.push_back(1);
  EXPECT_EQ(parse(padded, f, &why), -EPROTO) << "a probe has no payload";
  auto next = evrdma::keepaliveFrame(FrameType::KeepaliveReply, 0);
  next[1] = static_cast<uint8_t>(FrameType::KeepaliveReply) + 1;
  EXPECT_EQ(parse(next, f, &why), -EPROTO);
  EXPECT_NE(why.find("unknown frame type"), std::string::npos);
}

TEST(Frame, CreditsCanBeFilledInAfterTheHeaderWasWritten) {
  std::vector<uint8_t> buffer(evrdma::Frame::kHeaderSize + 3, 0);
  evrdma::writeFrameHeader(buffer.data(), evrdma::FrameType::Data, 0, 3, 0);
  evrdma::setFrameCredits(buffer.data(), 513);
  evrdma::Frame f;
  std::string why;
  ASSERT_EQ(parse(buffer, f, &why), 0) << why;
  EXPECT_EQ(f.credits, 513);
  EXPECT_EQ(f.payloadLength, 3u);
  EXPECT_EQ(buffer, evrdma::dataFrame("\0\0\0", 3, 513)) << "the same bytes as the builder's";
}

}  // namespace
