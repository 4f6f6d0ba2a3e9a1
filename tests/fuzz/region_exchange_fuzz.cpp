// A peer's region frames (requests, grants, refusals, offers, releases) against one side's
// RegionExchange (handlers/src/RegionExchange.h), mixed with that side's own requests, offers
// and releases. The input is a script: each step's first byte picks a step, the bytes after it
// its fields. Checked at every step: what the side lends stays within maxLentBytes and equals
// what is really lent, it lends at most maxLentRegions at once, it never holds more than maxPeerRegions of the peer's, a protocol error
// says why, every frame it sends parses, and the application hears of a released region while
// the region is still there (ASan sees any use after it goes).
#include <cerrno>
#include <memory>
#include <vector>

#include "Frame.h"
#include "FuzzCheck.h"
#include "RegionExchange.h"

using evrdma::Frame;
using evrdma::FrameType;
using evrdma::MemoryRegion;
using evrdma::RemoteRegion;
using evrdma::detail::RegionExchange;

namespace {

constexpr uint64_t kMaxLentBytes = 1 << 20;
constexpr uint32_t kMaxLentRegions = 6;
constexpr uint32_t kMaxPeerRegions = 8;

struct Side final : RegionExchange::Events {
  void onGranted(uint64_t, const RemoteRegion& region) noexcept override { FUZZ_CHECK(region.length > 0); }
  void onRefused(uint64_t, int err) noexcept override { FUZZ_CHECK(err < 0); }
  void onReceived(const RemoteRegion& region, uint64_t) noexcept override { FUZZ_CHECK(region.length > 0); }
  void onLent(const MemoryRegion& region) noexcept override { lent.push_back(&region); }
  void onReleased(const MemoryRegion& region) noexcept override {
    FUZZ_CHECK(*liveRegion(&region) != nullptr);  // still there
    for (auto& r : lent)
      if (r == &region) r = nullptr;
  }
  const MemoryRegion** liveRegion(const MemoryRegion* region) {
    for (auto& r : lent)
      if (r == region) return &r;
    static const MemoryRegion* none = nullptr;
    return &none;
  }

  std::vector<const MemoryRegion*> lent;  // as onLent gave them, null once released
  std::vector<RemoteRegion> lentRemote;   // what the peer was told, to release it by
  uint64_t liveBytes = 0;                 // lent and not given back, as the allocator counts
  uint64_t allocations = 0;
  evrdma::detail::ConnectionTally stats;
};

// Mostly the access bits a region may have; now and then any bits.
uint32_t accessFrom(fuzz::Reader& in) {
  switch (in.byte() % 5) {
    case 0: return 0;
    case 1: return evrdma::kRemoteRead;
    case 2: return evrdma::kRemoteWrite;
    case 3: return evrdma::kRemoteRead | evrdma::kRemoteWrite;
    default: return in.byte();
  }
}

RemoteRegion regionFrom(fuzz::Reader& in) {
  RemoteRegion r;
  r.address = in.u64();
  r.length = in.byte() % 2 ? in.byte() + 1 : in.u64();
  r.rkey = in.byte();
  r.access = accessFrom(in);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  Side side;
  auto exchange = std::make_unique<RegionExchange>(
      kMaxLentBytes, kMaxLentRegions, kMaxPeerRegions,
      [](std::vector<uint8_t> frame) {
        Frame parsed;
        const char* why = nullptr;
        FUZZ_CHECK(evrdma::parseFrame(frame.data(), frame.size(), parsed, why) == 0);
        return 0;
      },
      [&side](uint64_t bytes, int, RemoteRegion& remote, evrdma::MemoryCharge&,
              int& error) -> RegionExchange::LentRegion {
        if (bytes > 4096) {  // as a lending pool that is full would
          error = -ENOMEM;
          return nullptr;
        }
        ++side.allocations;
        remote = RemoteRegion{0x100000000ull * side.allocations, bytes, static_cast<uint32_t>(side.allocations),
                              evrdma::kRemoteRead | evrdma::kRemoteWrite};
        side.lentRemote.push_back(remote);
        side.liveBytes += bytes;
        auto* region = new MemoryRegion();
        return RegionExchange::LentRegion(region, [&side, bytes](MemoryRegion* given) {
          side.liveBytes -= bytes;
          delete given;
        });
      },
      side, side.stats);

  while (!in.empty()) {
    const uint8_t step = in.byte();
    std::vector<uint8_t> frame;
    switch (step % 8) {
      case 0: {  // raw bytes from the peer
        size_t length = 0;
        const uint8_t* at = in.span(in.byte() % 64, length);
        frame.assign(at, at + length);
        break;
      }
      case 1: frame = evrdma::regionRequestFrame(in.byte() % 4, in.byte() % 2 ? in.u64() : in.byte(), accessFrom(in), 0); break;
      case 2: frame = evrdma::regionGrantFrame(in.byte() % 4, regionFrom(in), 0); break;
      case 3: frame = evrdma::regionRefusedFrame(in.byte() % 4, static_cast<uint32_t>(in.byte() % 2 ? in.u64() : in.byte()), 0); break;
      case 4: frame = evrdma::regionOfferFrame(regionFrom(in), in.byte(), 0); break;
      case 5: {  // a release: of something we lent, or made up
        const uint8_t pick = in.byte();
        if (pick < side.lentRemote.size()) {
          frame = evrdma::regionReleaseFrame(side.lentRemote[pick].rkey, side.lentRemote[pick].address, 0);
        } else {
          const RemoteRegion r = regionFrom(in);
          frame = evrdma::regionReleaseFrame(r.rkey, r.address, 0);
        }
        break;
      }
      case 6: {  // our application asks, or offers
        if (step & 8) {
          exchange->offer(regionFrom(in), in.byte());
        } else {
          const int rc = exchange->request(in.byte() % 2 ? in.u64() : in.byte(), static_cast<int>(accessFrom(in)), in.byte());
          FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOSPC);
        }
        break;
      }
      case 7: {  // our application releases one of the peer's regions, or one it never had
        const uint8_t pick = in.byte();
        const auto& regions = exchange->peerRegions();
        const int rc = exchange->release(pick < regions.size() ? regions[pick] : regionFrom(in));
        FUZZ_CHECK(rc == 0 || rc == -ENOENT);
        break;
      }
    }
    if (!frame.empty()) {
      Frame parsed;
      const char* why = nullptr;
      if (evrdma::parseFrame(frame.data(), frame.size(), parsed, why) != 0) continue;  // never reaches the exchange
      if (parsed.type < FrameType::RegionRequest || parsed.type > FrameType::RegionRelease) continue;
      if (exchange->onFrame(parsed, why) != 0) {
        FUZZ_CHECK(why != nullptr && why[0] != '\0');
        break;  // the connection fails here
      }
    }
    FUZZ_CHECK(exchange->lentBytes() <= kMaxLentBytes);
    FUZZ_CHECK(exchange->lentRegions() <= kMaxLentRegions);
    FUZZ_CHECK(exchange->lentBytes() == side.liveBytes);
    FUZZ_CHECK(exchange->peerRegions().size() <= kMaxPeerRegions);
  }
  exchange.reset();
  FUZZ_CHECK(side.liveBytes == 0);  // every lent region given back when the connection goes
  return 0;
}
