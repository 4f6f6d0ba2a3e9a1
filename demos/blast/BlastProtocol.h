// The blast request a client puts in its connect private data, and how a server checks it.
// Wire, big-endian, 24 bytes: "EVBL" | u8 version (1) | u8 mode | u16 flags | u32 buffers |
// u32 size | u64 count. Flag 1: the client writes a full pattern into every message (verify).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace blast {

enum class Mode : uint8_t { Send = 0, Write = 1, WriteImm = 2, Read = 3 };
const char* toString(Mode mode) noexcept;
// "send", "write", "write_imm", "read"; false for anything else.
bool parseMode(const std::string& text, Mode& out) noexcept;

struct Request {
  Mode mode = Mode::Send;
  uint32_t buffers = 8;  // operations in flight
  uint32_t size = 65536;  // bytes per operation
  uint64_t count = 10000;  // operations per connection
  bool patterned = false;  // every byte follows patternByte (else only the sequence number)
};

struct Limits {
  uint32_t maxBuffers = 1024;
  uint32_t maxSize = 16u << 20;
  uint64_t maxCount = 1000000000;
  // buffers x size: the memory one client's request makes the server register (its receive
  // ring, the region it lends, or the one it sends to be read).
  uint64_t maxBytes = uint64_t{256} << 20;
};

constexpr size_t kRequestSize = 24;
constexpr uint16_t kDefaultPort = 7472;

std::vector<uint8_t> encode(const Request& request);
// Parses and checks a (possibly padded) request. Empty string: fine; else why it is refused (the
// reject reason the client will read).
std::string decode(const uint8_t* data, size_t length, const Limits& limits, Request& out);

}  // namespace blast
