// RegionExchange: recording, matching and releasing the regions requested, granted, lent and sent.
#include "RegionExchange.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "Frame.h"

namespace evrdma::detail {
namespace {
constexpr int kRemoteAccess = kRemoteRead | kRemoteWrite;

bool sameRegion(const RemoteRegion& r, uint32_t rkey, uint64_t address) {
  return r.rkey == rkey && r.address == address;
}
}  // namespace

RegionExchange::RegionExchange(uint64_t maxLentBytes, uint32_t maxLentRegions, uint32_t maxPeerRegions, SendFrame send,
                               Allocate allocate, Events& events, ConnectionTally& stats)
    : maxLentBytes_(maxLentBytes),
      maxLentRegions_(maxLentRegions),
      maxPeerRegions_(maxPeerRegions),
      send_(std::move(send)),
      allocate_(std::move(allocate)),
      events_(events),
      stats_(stats) {}

int RegionExchange::request(uint64_t bytes, int access, uint64_t tag) noexcept {
  if (bytes == 0 || (access & ~kRemoteAccess) != 0 || (access & kRemoteAccess) == 0) return -EINVAL;
  if (peerRegions_.size() + requested_.size() >= maxPeerRegions_) return -ENOSPC;
  const uint64_t id = nextRequestId_++;
  requested_.push_back({id, tag, bytes, static_cast<uint32_t>(access)});
  return send_(regionRequestFrame(id, bytes, static_cast<uint32_t>(access), 0));
}

int RegionExchange::offer(const RemoteRegion& region, uint64_t tag) noexcept {
  // Never a frame the peer must refuse as malformed (which ends the connection): the same checks
  // as the peer's parser (a length, no wrap-around, known access bits).
  uint8_t wire[RemoteRegion::kWireSize];
  region.encode(wire);
  RemoteRegion checked;
  if (!RemoteRegion::decode(wire, sizeof wire, checked)) return -EINVAL;
  sent_.push_back(region);
  return send_(regionOfferFrame(region, tag, 0));
}

int RegionExchange::release(const RemoteRegion& region) noexcept {
  auto it = std::find_if(peerRegions_.begin(), peerRegions_.end(),
                         [&](const RemoteRegion& r) { return sameRegion(r, region.rkey, region.address); });
  if (it == peerRegions_.end()) return -ENOENT;
  peerRegions_.erase(it);
  return send_(regionReleaseFrame(region.rkey, region.address, 0));
}

bool RegionExchange::advertisedByPeer(const RemoteRegion& remote) const noexcept {
  for (const RemoteRegion& r : peerRegions_) {
    if (r.rkey != remote.rkey || remote.address < r.address) continue;
    const uint64_t offset = remote.address - r.address;
    if (offset <= r.length && remote.length <= r.length - offset && (remote.access & ~r.access) == 0) return true;
  }
  return false;
}

int RegionExchange::onFrame(const Frame& frame, const char*& why) noexcept {
  switch (frame.type) {
    case FrameType::RegionRequest:
      onRequest(frame);
      return 0;
    case FrameType::RegionGrant:
    case FrameType::RegionRefused:
      return onAnswer(frame, why);
    case FrameType::RegionOffer:
      if (peerRegions_.size() + requested_.size() >= maxPeerRegions_) {
        why = "the peer sent more regions than maxPeerRegions";
        return -EPROTO;
      }
      peerRegions_.push_back(frame.region);
      events_.onReceived(frame.region, frame.tag);
      return 0;
    case FrameType::RegionRelease:
      return onRelease(frame, why);
    default:
      why = "not a region frame";
      return -EPROTO;
  }
}

void RegionExchange::onRequest(const Frame& frame) noexcept {
  int error = 0;
  RemoteRegion remote;
  LentRegion region;
  MemoryCharge charge;
  if (maxLentBytes_ == 0) {
    error = EACCES;  // this side lends nothing
  } else if (frame.requestBytes > maxLentBytes_ - lentBytes_) {
    error = ENOMEM;  // over what this side agreed to lend
  } else if (lent_.size() >= maxLentRegions_) {
    error = ENOSPC;  // as many regions as this side agreed to lend
  } else {
    region = allocate_(frame.requestBytes, static_cast<int>(frame.requestAccess), remote, charge, error);
    if (!region) error = error < 0 ? -error : ENOMEM;
  }
  if (error != 0) {
    send_(regionRefusedFrame(frame.requestId, static_cast<uint32_t>(error), 0));
    return;
  }
  lentBytes_ += frame.requestBytes;
  stats_.add(&ConnectionStats::regionsLent);
  lent_.push_back({remote, std::move(region), std::move(charge)});
  if (send_(regionGrantFrame(frame.requestId, remote, 0)) != 0) return;
  events_.onLent(*lent_.back().region);
}

int RegionExchange::onAnswer(const Frame& frame, const char*& why) noexcept {
  auto it = std::find_if(requested_.begin(), requested_.end(), [&](const Request& r) { return r.id == frame.requestId; });
  if (it == requested_.end()) {
    why = "the peer answered a region request that was never made";
    return -EPROTO;
  }
  const Request request = *it;
  requested_.erase(it);
  if (frame.type == FrameType::RegionRefused) {
    if (frame.error == 0 || frame.error > 4095) {
      why = "the peer refused a region request with an invalid error";
      return -EPROTO;
    }
    events_.onRefused(request.tag, -static_cast<int>(frame.error));
    return 0;
  }
  if (frame.region.length != request.bytes || frame.region.access != request.access) {
    why = "the peer granted a region other than the one requested";
    return -EPROTO;
  }
  peerRegions_.push_back(frame.region);
  events_.onGranted(request.tag, frame.region);
  return 0;
}

int RegionExchange::onRelease(const Frame& frame, const char*& why) noexcept {
  auto lent = std::find_if(lent_.begin(), lent_.end(),
                           [&](const Lent& l) { return sameRegion(l.remote, frame.releaseRkey, frame.releaseAddress); });
  if (lent != lent_.end()) {
    // Out of the list first: the application's callback may lend, release or close.
    Lent released = std::move(*lent);
    lent_.erase(lent);
    lentBytes_ -= released.remote.length;
    events_.onReleased(*released.region);  // while it is still there: pointers into it go now
    return 0;  // and so does the region: deregistered (out of the peer's reach), or back in the pool
  }
  auto sent = std::find_if(sent_.begin(), sent_.end(),
                           [&](const RemoteRegion& r) { return sameRegion(r, frame.releaseRkey, frame.releaseAddress); });
  if (sent != sent_.end()) {
    sent_.erase(sent);
    return 0;
  }
  why = "the peer released a region it was never given";
  return -EPROTO;
}

}  // namespace evrdma::detail
