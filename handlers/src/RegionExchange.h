// RegionExchange: the memory-region bookkeeping of a framed connection, both ways.
//   requested  our requestRegion()s the peer has not answered yet
//   granted /  regions the peer lent us (answering a request) or offered (sendRegion); we may
//   offered    read / write them until we release them: they are the only remote regions a
//              one-sided operation may target
//   lent       regions we registered because the peer asked (up to maxLentBytes in all)
//   sent       our regions we advertised with sendRegion
// The frames go out through an injected sender and lent memory comes from an injected allocator,
// so the protocol is unit-tested without a device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ConnectionTally.h"
#include "MemoryAccount.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma {
struct Frame;
}

namespace evrdma::detail {

class RegionExchange {
 public:
  // Sends one protocol frame (it spends a credit and may wait for one): 0 or -errno.
  using SendFrame = std::function<int(std::vector<uint8_t> frame)>;
  // A region lent to the peer; its deleter gives it back (deregisters it, or returns it to the
  // connection's lending pool).
  using LentRegion = std::unique_ptr<MemoryRegion, std::function<void(MemoryRegion*)>>;
  // Finds `bytes` with `access` for the peer (registers them, or takes them from a lending pool)
  // and describes them in `remote`, with what it costs charged in `charge` (kept as long as the
  // region); null with `error` = -errno on failure.
  using Allocate = std::function<LentRegion(uint64_t bytes, int access, RemoteRegion& remote, MemoryCharge& charge,
                                            int& error)>;
  // What the application hears.
  class Events {
   public:
    virtual void onGranted(uint64_t tag, const RemoteRegion& region) noexcept = 0;
    virtual void onRefused(uint64_t tag, int err) noexcept = 0;
    virtual void onReceived(const RemoteRegion& region, uint64_t tag) noexcept = 0;
    virtual void onLent(const MemoryRegion& region) noexcept = 0;
    // The peer released a region we lent it: told before the region goes.
    virtual void onReleased(const MemoryRegion& region) noexcept = 0;

   protected:
    ~Events() = default;
  };

  // Counts the regions it lends in `stats`.
  RegionExchange(uint64_t maxLentBytes, uint32_t maxLentRegions, uint32_t maxPeerRegions, SendFrame send,
                 Allocate allocate, Events& events, ConnectionTally& stats);

  // Asks the peer for `bytes` with `access` (kRemoteRead and/or kRemoteWrite). 0, -EINVAL (0 bytes
  // or a bad access), -ENOSPC (maxPeerRegions held or asked for), or the sender's error.
  int request(uint64_t bytes, int access, uint64_t tag) noexcept;
  // Advertises one of our regions to the peer: 0, -EINVAL (a region the peer could not accept),
  // or the sender's error.
  int offer(const RemoteRegion& region, uint64_t tag) noexcept;
  // Forgets a region the peer advertised and tells the peer; -ENOENT if it is not one.
  int release(const RemoteRegion& region) noexcept;
  // Whether `remote` lies inside a region the peer advertised, with no more access than granted.
  bool advertisedByPeer(const RemoteRegion& remote) const noexcept;

  // A region frame from the peer (request, grant, refusal, offer, release). 0, or -EPROTO with
  // `why` when the peer broke the protocol.
  int onFrame(const Frame& frame, const char*& why) noexcept;

  const std::vector<RemoteRegion>& peerRegions() const noexcept { return peerRegions_; }
  uint64_t lentBytes() const noexcept { return lentBytes_; }
  size_t lentRegions() const noexcept { return lent_.size(); }

 private:
  struct Request {
    uint64_t id, tag, bytes;
    uint32_t access;
  };
  struct Lent {
    RemoteRegion remote;
    LentRegion region;
    MemoryCharge charge;  // given back after the region has gone
  };
  void onRequest(const Frame& frame) noexcept;
  int onAnswer(const Frame& frame, const char*& why) noexcept;
  int onRelease(const Frame& frame, const char*& why) noexcept;

  uint64_t maxLentBytes_;
  uint32_t maxLentRegions_;
  uint32_t maxPeerRegions_;
  SendFrame send_;
  Allocate allocate_;
  Events& events_;
  std::vector<Request> requested_;
  uint64_t nextRequestId_ = 1;
  std::vector<RemoteRegion> peerRegions_;
  std::vector<Lent> lent_;
  std::vector<RemoteRegion> sent_;
  uint64_t lentBytes_ = 0;
  ConnectionTally& stats_;
};

}  // namespace evrdma::detail
