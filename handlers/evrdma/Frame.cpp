#include "evrdma/Frame.h"

#include <endian.h>

#include <cerrno>
#include <cstring>

namespace evrdma {
namespace {

uint64_t getU64(const uint8_t* in) noexcept {
  uint64_t v;
  std::memcpy(&v, in, 8);
  return be64toh(v);
}
uint32_t getU32(const uint8_t* in) noexcept {
  uint32_t v;
  std::memcpy(&v, in, 4);
  return be32toh(v);
}
void putU64(uint8_t* out, uint64_t v) noexcept {
  v = htobe64(v);
  std::memcpy(out, &v, 8);
}
void putU32(uint8_t* out, uint32_t v) noexcept {
  v = htobe32(v);
  std::memcpy(out, &v, 4);
}

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
  }
  return -2;
}

std::vector<uint8_t> frame(FrameType type, uint16_t credits, uint64_t requestId, size_t payloadLength) {
  std::vector<uint8_t> out(Frame::kHeaderSize + payloadLength);
  out[0] = Frame::kVersion;
  out[1] = static_cast<uint8_t>(type);
  uint16_t c = htobe16(credits);
  std::memcpy(out.data() + 2, &c, 2);
  putU32(out.data() + 4, static_cast<uint32_t>(payloadLength));
  putU64(out.data() + 8, requestId);
  return out;
}

}  // namespace

int parseFrame(const uint8_t* data, size_t size, Frame& out, const char*& why) noexcept {
  auto bad = [&why](const char* what) {
    why = what;
    return -EPROTO;
  };
  if (data == nullptr || size < Frame::kHeaderSize) return bad("shorter than a frame header");
  if (data[0] != Frame::kVersion) return bad("unknown frame version");
  if (data[1] > static_cast<uint8_t>(FrameType::Credit)) return bad("unknown frame type");
  Frame f;
  f.type = static_cast<FrameType>(data[1]);
  uint16_t credits;
  std::memcpy(&credits, data + 2, 2);
  f.credits = be16toh(credits);
  f.payloadLength = getU32(data + 4);
  f.requestId = getU64(data + 8);
  if (f.payloadLength != size - Frame::kHeaderSize) return bad("payload length disagrees with the bytes received");
  long expected = payloadSizeOf(f.type);
  if (expected >= 0 && f.payloadLength != static_cast<size_t>(expected))
    return bad("payload length wrong for the frame type");
  f.payload = data + Frame::kHeaderSize;
  switch (f.type) {
    case FrameType::RegionRequest:
      f.requestBytes = getU64(f.payload);
      f.requestAccess = getU32(f.payload + 8);
      if (f.requestBytes == 0) return bad("region request for 0 bytes");
      if ((f.requestAccess & ~static_cast<uint32_t>(kRemoteRead | kRemoteWrite)) != 0 || f.requestAccess == 0)
        return bad("region request with unknown or no access");
      break;
    case FrameType::RegionGrant:
    case FrameType::RegionOffer:
      if (!RemoteRegion::decode(f.payload, RemoteRegion::kWireSize, f.region)) return bad("malformed region");
      if (f.type == FrameType::RegionOffer) f.tag = getU64(f.payload + RemoteRegion::kWireSize);
      break;
    case FrameType::RegionRefused:
      f.error = getU32(f.payload);
      break;
    case FrameType::RegionRelease:
      f.releaseRkey = getU32(f.payload);
      f.releaseAddress = getU64(f.payload + 4);
      break;
    case FrameType::Data:
    case FrameType::Credit:
      break;
  }
  out = f;
  return 0;
}

std::vector<uint8_t> dataFrame(const void* data, size_t length, uint16_t credits) {
  auto out = frame(FrameType::Data, credits, 0, length);
  if (length > 0) std::memcpy(out.data() + Frame::kHeaderSize, data, length);
  return out;
}

std::vector<uint8_t> regionRequestFrame(uint64_t requestId, uint64_t bytes, uint32_t access, uint16_t credits) {
  auto out = frame(FrameType::RegionRequest, credits, requestId, 12);
  putU64(out.data() + Frame::kHeaderSize, bytes);
  putU32(out.data() + Frame::kHeaderSize + 8, access);
  return out;
}

std::vector<uint8_t> regionGrantFrame(uint64_t requestId, const RemoteRegion& region, uint16_t credits) {
  auto out = frame(FrameType::RegionGrant, credits, requestId, RemoteRegion::kWireSize);
  region.encode(out.data() + Frame::kHeaderSize);
  return out;
}

std::vector<uint8_t> regionRefusedFrame(uint64_t requestId, uint32_t error, uint16_t credits) {
  auto out = frame(FrameType::RegionRefused, credits, requestId, 4);
  putU32(out.data() + Frame::kHeaderSize, error);
  return out;
}

std::vector<uint8_t> regionOfferFrame(const RemoteRegion& region, uint64_t tag, uint16_t credits) {
  auto out = frame(FrameType::RegionOffer, credits, 0, RemoteRegion::kWireSize + 8);
  region.encode(out.data() + Frame::kHeaderSize);
  putU64(out.data() + Frame::kHeaderSize + RemoteRegion::kWireSize, tag);
  return out;
}

std::vector<uint8_t> regionReleaseFrame(uint32_t rkey, uint64_t address, uint16_t credits) {
  auto out = frame(FrameType::RegionRelease, credits, 0, 12);
  putU32(out.data() + Frame::kHeaderSize, rkey);
  putU64(out.data() + Frame::kHeaderSize + 4, address);
  return out;
}

std::vector<uint8_t> creditFrame(uint16_t credits) { return frame(FrameType::Credit, credits, 0, 0); }

}  // namespace evrdma
