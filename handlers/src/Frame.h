// Frame: the header evrdma puts on its own messages once a connection uses the data-path
// protocol: application data, memory-region requests, grants, offers and releases, and credits.
// Everything a peer sends is checked here before anything acts on it.
//
// Wire format, big-endian:  u8 version (1) | u8 type | u16 credits | u32 payload length |
//                           u64 request id | payload
// The type byte's top bits: kAskBit (on a credit-only frame) asks the receiver for credits, the
// sender has messages waiting for them; kAnswerBit (on any frame) says its credits answer the
// receiver's ask (see CreditLedger).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "evrdma/MemoryRegion.h"

namespace evrdma {

enum class FrameType : uint8_t {
  Data = 0,           // application bytes
  RegionRequest = 1,  // "allocate and register N bytes for me": u64 bytes, u32 access
  RegionGrant = 2,    // the answer: a RemoteRegion
  RegionRefused = 3,  // the answer: u32 errno
  RegionOffer = 4,    // "here is a region of mine": a RemoteRegion, u64 tag
  RegionRelease = 5,  // "forget the region with this rkey and address": u32 rkey, u64 address
  Credit = 6,         // credits only (in the header), no payload
  Hello = 7,          // each side's first frame: u64 the largest message it receives (maxMessageSize)
  KeepaliveProbe = 8,  // "are you there?": the peer answers with a KeepaliveReply; no payload
  KeepaliveReply = 9,  // no payload
};

struct Frame {
  static constexpr uint8_t kVersion = 1;
  static constexpr size_t kHeaderSize = 16;
  // The largest payload of evrdma's own frames (a region offer): every receive buffer holds it.
  static constexpr size_t kLargestControlPayload = 32;
  static constexpr uint8_t kAskBit = 0x80;
  static constexpr uint8_t kAnswerBit = 0x40;

  FrameType type = FrameType::Data;
  uint16_t credits = 0;     // receives the sender posted since its previous frame
  bool asksForCredits = false;  // kAskBit: the sender waits for credits, and asks for them
  bool answersAsk = false;      // kAnswerBit: these credits answer the receiver's ask
  uint64_t requestId = 0;   // pairs a request and its answer; 0 when none
  const uint8_t* payload = nullptr;  // points into the parsed buffer
  size_t payloadLength = 0;

  // Decoded payloads, by type.
  uint64_t requestBytes = 0;   // RegionRequest
  uint32_t requestAccess = 0;  // RegionRequest: kRemoteRead / kRemoteWrite
  RemoteRegion region;         // RegionGrant, RegionOffer
  uint64_t tag = 0;            // RegionOffer
  uint32_t error = 0;          // RegionRefused: a positive errno
  uint32_t releaseRkey = 0;    // RegionRelease
  uint64_t releaseAddress = 0;
  uint64_t maxMessageSize = 0;  // Hello: at least 1
};

// Parses `size` received bytes into `out`: its header fields and the decoded payload of its type
// (the other types' fields are left as they were). 0, or -EPROTO with `why` saying what is wrong
// (short header, unknown version or type, a length that disagrees with the bytes received or with
// the type), `out` then part-written.
int parseFrame(const uint8_t* data, size_t size, Frame& out, const char*& why) noexcept;

// Writes a header at `out` (kHeaderSize bytes), for a payload written after it.
void writeFrameHeader(uint8_t* out, FrameType type, uint16_t credits, uint32_t payloadLength,
                      uint64_t requestId) noexcept;
// Rewrites the credits of a header written before (decided when the frame goes out), and
// whether it asks for credits (kAskBit) or answers an ask (kAnswerBit).
void setFrameCredits(uint8_t* header, uint16_t credits, bool asksForCredits = false, bool answersAsk = false) noexcept;

// Builders: each returns the whole frame, header included.
std::vector<uint8_t> dataFrame(const void* data, size_t length, uint16_t credits);
std::vector<uint8_t> regionRequestFrame(uint64_t requestId, uint64_t bytes, uint32_t access, uint16_t credits);
std::vector<uint8_t> regionGrantFrame(uint64_t requestId, const RemoteRegion& region, uint16_t credits);
std::vector<uint8_t> regionRefusedFrame(uint64_t requestId, uint32_t error, uint16_t credits);
std::vector<uint8_t> regionOfferFrame(const RemoteRegion& region, uint64_t tag, uint16_t credits);
std::vector<uint8_t> regionReleaseFrame(uint32_t rkey, uint64_t address, uint16_t credits);
std::vector<uint8_t> creditFrame(uint16_t credits);
std::vector<uint8_t> helloFrame(uint64_t maxMessageSize, uint16_t credits);
std::vector<uint8_t> keepaliveFrame(FrameType type, uint16_t credits);  // KeepaliveProbe or KeepaliveReply

}  // namespace evrdma
