// A received frame (handlers/src/Frame.h), as any peer may send it: parseFrame accepts it or
// says why not; what it accepts lies inside the bytes received, and the builders turn its decoded
// fields back into a frame that parses to the same fields.
#include <cstring>
#include <vector>

#include "FuzzCheck.h"
#include "Frame.h"

using evrdma::Frame;
using evrdma::FrameType;

namespace {

std::vector<uint8_t> rebuild(const Frame& f) {
  switch (f.type) {
    case FrameType::Data: return evrdma::dataFrame(f.payload, f.payloadLength, f.credits);
    case FrameType::RegionRequest:
      return evrdma::regionRequestFrame(f.requestId, f.requestBytes, f.requestAccess, f.credits);
    case FrameType::RegionGrant: return evrdma::regionGrantFrame(f.requestId, f.region, f.credits);
    case FrameType::RegionRefused: return evrdma::regionRefusedFrame(f.requestId, f.error, f.credits);
    case FrameType::RegionOffer: return evrdma::regionOfferFrame(f.region, f.tag, f.credits);
    case FrameType::RegionRelease: return evrdma::regionReleaseFrame(f.releaseRkey, f.releaseAddress, f.credits);
    case FrameType::Credit: return evrdma::creditFrame(f.credits);
    case FrameType::Hello: return evrdma::helloFrame(f.maxMessageSize, f.credits);
    case FrameType::KeepaliveProbe:
    case FrameType::KeepaliveReply: return evrdma::keepaliveFrame(f.type, f.credits);
  }
  return {};
}

bool sameFields(const Frame& a, const Frame& b) {
  return a.type == b.type && a.credits == b.credits && a.payloadLength == b.payloadLength &&
         std::memcmp(a.payload, b.payload, a.payloadLength) == 0 && a.requestBytes == b.requestBytes &&
         a.requestAccess == b.requestAccess && a.region.address == b.region.address &&
         a.region.length == b.region.length && a.region.rkey == b.region.rkey &&
         a.region.access == b.region.access && a.tag == b.tag && a.error == b.error &&
         a.releaseRkey == b.releaseRkey && a.releaseAddress == b.releaseAddress &&
         a.maxMessageSize == b.maxMessageSize;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan sees any read past the end.
  std::vector<uint8_t> received(data, data + size);
  Frame f;
  const char* why = nullptr;
  if (evrdma::parseFrame(received.data(), received.size(), f, why) != 0) {
    FUZZ_CHECK(why != nullptr && why[0] != '\0');
    return 0;
  }
  FUZZ_CHECK(f.payload == received.data() + Frame::kHeaderSize);
  FUZZ_CHECK(Frame::kHeaderSize + f.payloadLength == received.size());
  if (f.type == FrameType::Hello) FUZZ_CHECK(f.maxMessageSize >= 1);
  if (f.type == FrameType::RegionGrant || f.type == FrameType::RegionOffer) {
    FUZZ_CHECK(f.region.length > 0);
    FUZZ_CHECK(f.region.address + f.region.length > f.region.address);  // no wrap-around
  }
  std::vector<uint8_t> again = rebuild(f);
  Frame g;
  FUZZ_CHECK(evrdma::parseFrame(again.data(), again.size(), g, why) == 0);
  FUZZ_CHECK(sameFields(f, g));
  return 0;
}
