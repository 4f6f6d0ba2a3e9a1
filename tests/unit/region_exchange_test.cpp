// RegionExchange without a device: two sides wired back to back, every frame parsed as the peer
// would, lent memory from a fake allocator that hands out made-up keys.
#include "RegionExchange.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Frame.h"

namespace {

using evrdma::Frame;
using evrdma::MemoryRegion;
using evrdma::RemoteRegion;
using evrdma::detail::RegionExchange;

struct Side final : RegionExchange::Events {
  void onGranted(uint64_t tag, const RemoteRegion& region) noexcept override { granted.push_back({tag, region}); }
  void onRefused(uint64_t tag, int err) noexcept override { refused.push_back({tag, err}); }
  void onReceived(const RemoteRegion& region, uint64_t tag) noexcept override { received.push_back({tag, region}); }
  void onLent(const MemoryRegion& region) noexcept override {
    ++lentEvents;
    lentRegion = &region;
  }
  void onReleased(const MemoryRegion& region) noexcept override {
    ++releasedEvents;
    releasedRegion = &region;
    lentBytesWhenReleased = exchange->lentBytes();
  }

  std::vector<std::pair<uint64_t, RemoteRegion>> granted, received;
  std::vector<std::pair<uint64_t, int>> refused;
  int lentEvents = 0, releasedEvents = 0;
  const MemoryRegion* lentRegion = nullptr;
  const MemoryRegion* releasedRegion = nullptr;
  uint64_t lentBytesWhenReleased = ~0ull;
  std::deque<std::vector<uint8_t>> outbox;  // frames on their way to the other side
  int allocations = 0;
  int allocationError = 0;  // the allocator fails with this (-errno) when set
  evrdma::detail::ConnectionTally tally;
  evrdma::ConnectionStats& stats = tally.own;
  std::unique_ptr<RegionExchange> exchange;

  Side(uint64_t maxLentBytes, uint32_t maxPeerRegions, uint32_t maxLentRegions = 64) {
    exchange = std::make_unique<RegionExchange>(
        maxLentBytes, maxLentRegions, maxPeerRegions,
        [this](std::vector<uint8_t> frame) {
          outbox.push_back(std::move(frame));
          return 0;
        },
        [this](uint64_t bytes, int access, RemoteRegion& remote, evrdma::MemoryCharge&, int& error) {
          if (allocationError != 0) {
            error = allocationError;
            return std::unique_ptr<MemoryRegion>();
          }
          ++allocations;
          remote = RemoteRegion{0x10000000u * static_cast<uint64_t>(allocations), bytes,
                                static_cast<uint32_t>(1000 + allocations), static_cast<uint32_t>(access)};
          return std::make_unique<MemoryRegion>();  // unregistered: only its bookkeeping is tested
        },
        *this, tally);
  }
};

class RegionExchangeTest : public ::testing::Test {
 protected:
  // Delivers every frame in flight, both ways, until none is left. Returns the first protocol
  // error (with its text in `why`), or 0.
  int deliver() {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto [from, to] : {std::pair<Side*, Side*>{&a, &b}, {&b, &a}}) {
        while (!from->outbox.empty()) {
          std::vector<uint8_t> bytes = std::move(from->outbox.front());
          from->outbox.pop_front();
          Frame frame;
          const char* parseWhy = "";
          EXPECT_EQ(evrdma::parseFrame(bytes.data(), bytes.size(), frame, parseWhy), 0) << parseWhy;
          if (int rc = to->exchange->onFrame(frame, why); rc != 0) return rc;
          moved = true;
        }
      }
    }
    return 0;
  }
  // A frame of the test's own making, as if `a` had sent it to `b`.
  int injectIntoB(const std::vector<uint8_t>& bytes) {
    Frame frame;
    const char* parseWhy = "";
    EXPECT_EQ(evrdma::parseFrame(bytes.data(), bytes.size(), frame, parseWhy), 0) << parseWhy;
    return b.exchange->onFrame(frame, why);
  }

  Side a{1 << 20, 4, 2};  // lends at most 2 regions at once
  Side b{1 << 20, 4};
  const char* why = "";
};

TEST_F(RegionExchangeTest, ARequestedRegionIsLentGrantedAndUsableUntilReleased) {
  ASSERT_EQ(a.exchange->request(4096, evrdma::kRemoteWrite, 77), 0);
  ASSERT_EQ(deliver(), 0) << why;
  ASSERT_EQ(a.granted.size(), 1u);
  EXPECT_EQ(a.granted[0].first, 77u);
  const RemoteRegion region = a.granted[0].second;
  EXPECT_EQ(region.length, 4096u);
  EXPECT_EQ(region.access, static_cast<uint32_t>(evrdma::kRemoteWrite));
  EXPECT_EQ(b.lentEvents, 1);
  EXPECT_EQ(b.exchange->lentBytes(), 4096u);
  EXPECT_EQ(b.stats.regionsLent, 1u);

  EXPECT_TRUE(a.exchange->advertisedByPeer(region));
  RemoteRegion inside = region;
  inside.address += 100;
  inside.length = 100;
  EXPECT_TRUE(a.exchange->advertisedByPeer(inside));
  RemoteRegion beyond = inside;
  beyond.length = 4096;
  EXPECT_FALSE(a.exchange->advertisedByPeer(beyond));
  RemoteRegion moreAccess = region;
  moreAccess.access |= evrdma::kRemoteRead;
  EXPECT_FALSE(a.exchange->advertisedByPeer(moreAccess)) << "no more access than granted";

  ASSERT_EQ(a.exchange->release(region), 0);
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_FALSE(a.exchange->advertisedByPeer(region));
  EXPECT_EQ(b.exchange->lentBytes(), 0u) << "the lender freed it";
  EXPECT_EQ(a.exchange->release(region), -ENOENT) << "released already";
}

TEST_F(RegionExchangeTest, TheLenderIsToldOfAReleaseWithTheRegionItLentWhileItIsStillThere) {
  ASSERT_EQ(a.exchange->request(4096, evrdma::kRemoteWrite, 1), 0);
  ASSERT_EQ(deliver(), 0) << why;
  ASSERT_EQ(b.lentEvents, 1);
  EXPECT_EQ(b.releasedEvents, 0);
  ASSERT_EQ(a.exchange->release(a.granted[0].second), 0);
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_EQ(b.releasedEvents, 1);
  EXPECT_EQ(b.releasedRegion, b.lentRegion) << "the object onRegionLent handed out, not a copy";
  EXPECT_EQ(b.lentBytesWhenReleased, 0u) << "already out of the lender's count when told";
}

TEST_F(RegionExchangeTest, ARequestOverWhatTheLenderAgreedToLendIsRefusedWithENOMEM) {
  ASSERT_EQ(a.exchange->request((1 << 20) + 1, evrdma::kRemoteRead, 5), 0);
  ASSERT_EQ(deliver(), 0) << why;
  ASSERT_EQ(a.refused.size(), 1u);
  EXPECT_EQ(a.refused[0], (std::pair<uint64_t, int>{5, -ENOMEM}));
  EXPECT_EQ(b.allocations, 0);
  EXPECT_TRUE(a.exchange->peerRegions().empty());
}

TEST_F(RegionExchangeTest, ASideThatLendsNothingRefusesEveryRequestWithEACCESAndAllocatesNothing) {
  Side lendsNothing{0, 4};
  ASSERT_EQ(a.exchange->request(1, evrdma::kRemoteWrite, 6), 0);
  Frame frame;
  const char* parseWhy = "";
  ASSERT_EQ(evrdma::parseFrame(a.outbox.front().data(), a.outbox.front().size(), frame, parseWhy), 0) << parseWhy;
  a.outbox.pop_front();
  ASSERT_EQ(lendsNothing.exchange->onFrame(frame, why), 0) << why;
  ASSERT_EQ(lendsNothing.outbox.size(), 1u);
  ASSERT_EQ(evrdma::parseFrame(lendsNothing.outbox.front().data(), lendsNothing.outbox.front().size(), frame, parseWhy), 0);
  ASSERT_EQ(a.exchange->onFrame(frame, why), 0) << why;
  ASSERT_EQ(a.refused.size(), 1u);
  EXPECT_EQ(a.refused[0], (std::pair<uint64_t, int>{6, -EACCES}));
  EXPECT_EQ(lendsNothing.allocations, 0);
  EXPECT_EQ(lendsNothing.stats.regionsLent, 0u);
}

TEST_F(RegionExchangeTest, PastMaxLentRegionsARequestIsRefusedWithENOSPCUntilOneIsReleased) {
  // 1-byte regions: far below maxLentBytes, but each would be its own registration.
  for (uint64_t tag = 1; tag <= 3; ++tag) ASSERT_EQ(b.exchange->request(1, evrdma::kRemoteWrite, tag), 0);
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_EQ(a.allocations, 2);
  EXPECT_EQ(a.exchange->lentRegions(), 2u);
  ASSERT_EQ(b.granted.size(), 2u);
  ASSERT_EQ(b.refused.size(), 1u);
  EXPECT_EQ(b.refused[0].first, 3u);
  EXPECT_EQ(b.refused[0].second, -ENOSPC);
  ASSERT_EQ(b.exchange->release(b.granted[0].second), 0);
  ASSERT_EQ(b.exchange->request(1, evrdma::kRemoteWrite, 4), 0);
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_EQ(a.allocations, 3);
  ASSERT_EQ(b.granted.size(), 3u);
  EXPECT_EQ(b.granted[2].first, 4u);
}

TEST_F(RegionExchangeTest, AnAllocationThatFailsIsRefusedWithItsError) {
  b.allocationError = -EFAULT;
  ASSERT_EQ(a.exchange->request(64, evrdma::kRemoteRead, 6), 0);
  ASSERT_EQ(deliver(), 0) << why;
  ASSERT_EQ(a.refused.size(), 1u);
  EXPECT_EQ(a.refused[0].second, -EFAULT);
  EXPECT_EQ(b.exchange->lentBytes(), 0u);
}

TEST_F(RegionExchangeTest, BadRequestsAreRefusedBeforeAnythingIsSent) {
  EXPECT_EQ(a.exchange->request(0, evrdma::kRemoteRead, 1), -EINVAL);
  EXPECT_EQ(a.exchange->request(64, evrdma::kLocalWrite, 1), -EINVAL);
  EXPECT_EQ(a.exchange->request(64, 0, 1), -EINVAL);
  EXPECT_TRUE(a.outbox.empty());
}

TEST_F(RegionExchangeTest, AtMaxPeerRegionsHeldOrAskedForAFurtherRequestGetsENOSPC) {
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.exchange->request(64, evrdma::kRemoteRead, i), 0);
  EXPECT_EQ(a.exchange->request(64, evrdma::kRemoteRead, 9), -ENOSPC) << "four asked for";
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_EQ(a.exchange->request(64, evrdma::kRemoteRead, 9), -ENOSPC) << "four held";
  ASSERT_EQ(a.exchange->release(a.granted[0].second), 0);
  EXPECT_EQ(a.exchange->request(64, evrdma::kRemoteRead, 9), 0);
}

TEST_F(RegionExchangeTest, AnOfferedRegionReachesThePeerAndItsReleaseComesBack) {
  const RemoteRegion mine{0x5000, 256, 99, static_cast<uint32_t>(evrdma::kRemoteRead)};
  ASSERT_EQ(a.exchange->offer(mine, 31), 0);
  ASSERT_EQ(deliver(), 0) << why;
  ASSERT_EQ(b.received.size(), 1u);
  EXPECT_EQ(b.received[0].first, 31u);
  EXPECT_TRUE(b.exchange->advertisedByPeer(mine));
  ASSERT_EQ(b.exchange->release(mine), 0);
  EXPECT_EQ(deliver(), 0) << "a release of a region we offered is part of the protocol: " << why;
}

TEST_F(RegionExchangeTest, ARegionThePeerCouldNotAcceptIsNotOfferedAtAll) {
  // Found by the region_exchange fuzzer: such an offer went out, and the peer's parser, refusing
  // it as malformed, ended the connection.
  const RemoteRegion empty{0x1000, 0, 5, static_cast<uint32_t>(evrdma::kRemoteRead)};
  const RemoteRegion wrapping{~0ull - 10, 100, 5, static_cast<uint32_t>(evrdma::kRemoteRead)};
  const RemoteRegion noAccess{0x1000, 100, 5, 0};
  for (const RemoteRegion& bad : {empty, wrapping, noAccess}) EXPECT_EQ(a.exchange->offer(bad, 1), -EINVAL);
  EXPECT_TRUE(a.outbox.empty());
  ASSERT_EQ(a.exchange->offer(RemoteRegion{0x1000, 100, 5, static_cast<uint32_t>(evrdma::kRemoteRead)}, 1), 0);
  ASSERT_EQ(deliver(), 0) << why;
  EXPECT_EQ(b.received.size(), 1u);
}

TEST_F(RegionExchangeTest, APeerThatBreaksTheProtocolIsToldWhy) {
  RemoteRegion fake{0x1000, 64, 5, static_cast<uint32_t>(evrdma::kRemoteRead)};
  EXPECT_EQ(injectIntoB(evrdma::regionGrantFrame(12345, fake, 0)), -EPROTO);
  EXPECT_EQ(std::string(why), "the peer answered a region request that was never made");
  EXPECT_EQ(injectIntoB(evrdma::regionReleaseFrame(5, 0x1000, 0)), -EPROTO);
  EXPECT_EQ(std::string(why), "the peer released a region it was never given");

  ASSERT_EQ(b.exchange->request(64, evrdma::kRemoteRead, 1), 0);  // request id 1
  EXPECT_EQ(injectIntoB(evrdma::regionRefusedFrame(1, 0, 0)), -EPROTO);
  EXPECT_EQ(std::string(why), "the peer refused a region request with an invalid error");

  ASSERT_EQ(b.exchange->request(64, evrdma::kRemoteRead, 2), 0);  // request id 2
  RemoteRegion other{0x1000, 128, 5, static_cast<uint32_t>(evrdma::kRemoteRead)};
  EXPECT_EQ(injectIntoB(evrdma::regionGrantFrame(2, other, 0)), -EPROTO);
  EXPECT_EQ(std::string(why), "the peer granted a region other than the one requested");

  for (int i = 0; i < 4; ++i) EXPECT_EQ(injectIntoB(evrdma::regionOfferFrame(fake, i, 0)), 0);
  EXPECT_EQ(injectIntoB(evrdma::regionOfferFrame(fake, 4, 0)), -EPROTO);
  EXPECT_EQ(std::string(why), "the peer sent more regions than maxPeerRegions");
}

}  // namespace
