// The blast request in connect private data: what a server accepts and what it refuses, and why.
#include "BlastProtocol.h"

#include <gtest/gtest.h>

namespace {

using blast::Limits;
using blast::Mode;
using blast::Request;

TEST(BlastProtocol, ARequestSurvivesTheWireAndThePaddingOfTheTransport) {
  Request in;
  in.mode = Mode::WriteImm;
  in.buffers = 32;
  in.size = 1 << 20;
  in.count = 123456789012ull;
  in.patterned = true;
  std::vector<uint8_t> wire = blast::encode(in);
  ASSERT_EQ(wire.size(), blast::kRequestSize);
  wire.resize(56, 0);  // InfiniBand / RoCE pad a connect request's private data to 56 bytes
  Request out;
  Limits roomy;
  roomy.maxCount = ~0ull;
  ASSERT_EQ(blast::decode(wire.data(), wire.size(), roomy, out), "");
  EXPECT_EQ(out.mode, Mode::WriteImm);
  EXPECT_EQ(out.buffers, 32u);
  EXPECT_EQ(out.size, 1u << 20);
  EXPECT_EQ(out.count, 123456789012ull);
  EXPECT_TRUE(out.patterned);
}

TEST(BlastProtocol, RefusesWithAReasonTheClientCanRead) {
  Request out;
  Request r;
  auto reason = [&](std::vector<uint8_t> wire, Limits limits = {}) {
    return blast::decode(wire.data(), wire.size(), limits, out);
  };
  EXPECT_EQ(reason({}), "not a blast client");
  EXPECT_EQ(reason(std::vector<uint8_t>(56, 0)), "not a blast client");
  auto wire = blast::encode(r);
  wire.resize(20);
  EXPECT_EQ(reason(wire), "not a blast client") << "too short";
  wire = blast::encode(r);
  wire[4] = 9;
  EXPECT_EQ(reason(wire), "blast protocol version 9 not supported");
  wire = blast::encode(r);
  wire[5] = 4;
  EXPECT_EQ(reason(wire), "unknown mode 4");
  wire = blast::encode(r);
  wire[6] = 0x80;
  EXPECT_EQ(reason(wire), "unknown flags in the request");
  Limits tight{4, 4096, 10};
  r.buffers = 5;
  EXPECT_EQ(reason(blast::encode(r), tight), "buffers 5 not in 1..4");
  r.buffers = 0;
  EXPECT_EQ(reason(blast::encode(r), tight), "buffers 0 not in 1..4");
  r.buffers = 4;
  r.size = 4097;
  EXPECT_EQ(reason(blast::encode(r), tight), "size 4097 not in 1..4096");
  r.size = 4096;
  r.count = 11;
  EXPECT_EQ(reason(blast::encode(r), tight), "count 11 not in 1..10");
  r.count = 10;
  EXPECT_EQ(reason(blast::encode(r), tight), "");
}

TEST(BlastProtocol, ARequestWithinEachLimitIsStillRefusedWhenBuffersTimesSizeIsOverThePerClientMemory) {
  Request r;
  r.buffers = 1024;  // each within the defaults (1024 buffers, 16 MiB)
  r.size = 16u << 20;
  Request out;
  const std::vector<uint8_t> wire = blast::encode(r);
  EXPECT_EQ(blast::decode(wire.data(), wire.size(), Limits{}, out),
            "buffers x size = 1024 x 16777216 B = 16384 MiB, more than the 256 MiB one client may have");
  r.buffers = 16;  // 256 MiB: at the limit
  const std::vector<uint8_t> fits = blast::encode(r);
  EXPECT_EQ(blast::decode(fits.data(), fits.size(), Limits{}, out), "");
}

TEST(BlastProtocol, ModesHaveTheirCommandLineNames) {
  Mode m = Mode::Send;
  for (const char* name : {"send", "write", "write_imm", "read"}) {
    ASSERT_TRUE(blast::parseMode(name, m)) << name;
    EXPECT_STREQ(blast::toString(m), name);
  }
  EXPECT_FALSE(blast::parseMode("WRITE", m));
  EXPECT_FALSE(blast::parseMode("", m));
}

}  // namespace
