// Frame: writing and parsing the 16-byte header of a framed connection's messages, and the bodies
// of its protocol frames.
#include "Frame.h"

#include <cerrno>
#include <cstring>

#include "evrdma/ByteOrder.h"

namespace evrdma {
namespace {

// The payload size each type must have; -1: any (Data).
long payloadSizeOf(FrameType type) noexcept {
  switch (type) {
    case FrameType::Data: return -1;
    case FrameType::RegionRequest: return 12;
    case FrameType::RegionGrant: return RemoteRegion::kWireSize;
    case FrameType::RegionRefused: return 4;
    case FrameType::RegionOffer: return RemoteRegion::kWireSize + 8;
    case FrameType::RegionRelease: return 12;
    case FrameType::Credit: return 0;
    case FrameType::Hello: return 8;
    case FrameType::KeepaliveProbe:
    case FrameType::KeepaliveReply: return 0;
  }
  return -2;
}

std::vector<uint8_t> frame(FrameType type, uint16_t credits, uint64_t requestId, size_t payloadLength) {
  std::vector<uint8_t> out(Frame::kHeaderSize + payloadLength);
  writeFrameHeader(out.data(), type, credits, static_cast<uint32_t>(payloadLength), requestId);
  return out;
}

}  // namespace

void writeFrameHeader(uint8_t* out, FrameType type, uint16_t credits, uint32_t payloadLength,
                      uint64_t requestId) noexcept {
  out[0] = Frame::kVersion;
  out[1] = static_cast<uint8_t>(type);
  putBig16(out + 2, credits);
  putBig32(out + 4, payloadLength);
  putBig64(out + 8, requestId);
}

void setFrameCredits(uint8_t* header, uint16_t credits, bool asksForCredits, bool answersAsk) noexcept {
  header[1] = static_cast<uint8_t>((header[1] & ~(Frame::kAskBit | Frame::kAnswerBit)) |
                                   (asksForCredits ? Frame::kAskBit : 0) | (answersAsk ? Frame::kAnswerBit : 0));
  putBig16(header + 2, credits);
}

int parseFrame(const uint8_t* data, size_t size, Frame& out, const char*& why) noexcept {
  auto bad = [&why](const char* what) {
    why = what;
    return -EPROTO;
  };
  if (data == nullptr || size < Frame::kHeaderSize) return bad("shorter than a frame header");
  if (data[0] != Frame::kVersion) return bad("unknown frame version");
  const uint8_t type = data[1] & ~(Frame::kAskBit | Frame::kAnswerBit);
  if (type > static_cast<uint8_t>(FrameType::KeepaliveReply)) return bad("unknown frame type");
  // Parsed in place (each message's path: no whole Frame built and copied); on failure `out` is
  // left part-written, and callers drop it.
  Frame& f = out;
  f.type = static_cast<FrameType>(type);
  f.asksForCredits = (data[1] & Frame::kAskBit) != 0;
  f.answersAsk = (data[1] & Frame::kAnswerBit) != 0;
  if (f.asksForCredits && f.type != FrameType::Credit) return bad("a frame other than a credit-only frame asks for credits");
  f.credits = getBig16(data + 2);
  f.payloadLength = getBig32(data + 4);
  f.requestId = getBig64(data + 8);
  if (f.payloadLength != size - Frame::kHeaderSize) return bad("payload length disagrees with the bytes received");
  long expected = payloadSizeOf(f.type);
  if (expected >= 0 && f.payloadLength != static_cast<size_t>(expected))
    return bad("payload length wrong for the frame type");
  f.payload = data + Frame::kHeaderSize;
  switch (f.type) {
    case FrameType::RegionRequest:
      f.requestBytes = getBig64(f.payload);
      f.requestAccess = getBig32(f.payload + 8);
      if (f.requestBytes == 0) return bad("region request for 0 bytes");
      if ((f.requestAccess & ~static_cast<uint32_t>(kRemoteRead | kRemoteWrite)) != 0 || f.requestAccess == 0)
        return bad("region request with unknown or no access");
      break;
    case FrameType::RegionGrant:
    case FrameType::RegionOffer:
      if (!RemoteRegion::decode(f.payload, RemoteRegion::kWireSize, f.region)) return bad("malformed region");
      if (f.type == FrameType::RegionOffer) f.tag = getBig64(f.payload + RemoteRegion::kWireSize);
      break;
    case FrameType::RegionRefused:
      f.error = getBig32(f.payload);
      break;
    case FrameType::RegionRelease:
      f.releaseRkey = getBig32(f.payload);
      f.releaseAddress = getBig64(f.payload + 4);
      break;
    case FrameType::Hello:
      f.maxMessageSize = getBig64(f.payload);
      if (f.maxMessageSize == 0) return bad("hello with a largest message of 0 bytes");
      break;
    case FrameType::Data:
    case FrameType::Credit:
    case FrameType::KeepaliveProbe:
    case FrameType::KeepaliveReply:
      break;
  }
  return 0;
}

static_assert(RemoteRegion::kWireSize + 8 == Frame::kLargestControlPayload, "a region offer is the largest frame");

std::vector<uint8_t> dataFrame(const void* data, size_t length, uint16_t credits) {
  auto out = frame(FrameType::Data, credits, 0, length);
  if (length > 0) std::memcpy(out.data() + Frame::kHeaderSize, data, length);
  return out;
}

std::vector<uint8_t> regionRequestFrame(uint64_t requestId, uint64_t bytes, uint32_t access, uint16_t credits) {
  auto out = frame(FrameType::RegionRequest, credits, requestId, 12);
  putBig64(out.data() + Frame::kHeaderSize, bytes);
  putBig32(out.data() + Frame::kHeaderSize + 8, access);
  return out;
}

std::vector<uint8_t> regionGrantFrame(uint64_t requestId, const RemoteRegion& region, uint16_t credits) {
  auto out = frame(FrameType::RegionGrant, credits, requestId, RemoteRegion::kWireSize);
  region.encode(out.data() + Frame::kHeaderSize);
  return out;
}

std::vector<uint8_t> regionRefusedFrame(uint64_t requestId, uint32_t error, uint16_t credits) {
  auto out = frame(FrameType::RegionRefused, credits, requestId, 4);
  putBig32(out.data() + Frame::kHeaderSize, error);
  return out;
}

std::vector<uint8_t> regionOfferFrame(const RemoteRegion& region, uint64_t tag, uint16_t credits) {
  auto out = frame(FrameType::RegionOffer, credits, 0, RemoteRegion::kWireSize + 8);
  region.encode(out.data() + Frame::kHeaderSize);
  putBig64(out.data() + Frame::kHeaderSize + RemoteRegion::kWireSize, tag);
  return out;
}

std::vector<uint8_t> regionReleaseFrame(uint32_t rkey, uint64_t address, uint16_t credits) {
  auto out = frame(FrameType::RegionRelease, credits, 0, 12);
  putBig32(out.data() + Frame::kHeaderSize, rkey);
  putBig64(out.data() + Frame::kHeaderSize + 4, address);
  return out;
}

std::vector<uint8_t> creditFrame(uint16_t credits) { return frame(FrameType::Credit, credits, 0, 0); }

std::vector<uint8_t> keepaliveFrame(FrameType type, uint16_t credits) { return frame(type, credits, 0, 0); }

std::vector<uint8_t> helloFrame(uint64_t maxMessageSize, uint16_t credits) {
  auto out = frame(FrameType::Hello, credits, 0, 8);
  putBig64(out.data() + Frame::kHeaderSize, maxMessageSize);
  return out;
}

}  // namespace evrdma
