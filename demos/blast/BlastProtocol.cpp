// Encoding and checking the blast request of BlastProtocol.h (the client's 24 bytes of connect
// private data).
#include "BlastProtocol.h"

#include <cstring>

#include "evrdma/ByteOrder.h"

namespace blast {
namespace {

constexpr char kMagic[4] = {'E', 'V', 'B', 'L'};
constexpr uint8_t kVersion = 1;

}  // namespace

const char* toString(Mode mode) noexcept {
  switch (mode) {
    case Mode::Send: return "send";
    case Mode::Write: return "write";
    case Mode::WriteImm: return "write_imm";
    case Mode::Read: return "read";
  }
  return "?";
}

bool parseMode(const std::string& text, Mode& out) noexcept {
  for (Mode mode : {Mode::Send, Mode::Write, Mode::WriteImm, Mode::Read}) {
    if (text == toString(mode)) {
      out = mode;
      return true;
    }
  }
  return false;
}

std::vector<uint8_t> encode(const Request& request) {
  std::vector<uint8_t> out(kRequestSize, 0);
  std::memcpy(out.data(), kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(request.mode);
  evrdma::putBig16(out.data() + 6, request.patterned ? 1 : 0);
  evrdma::putBig32(out.data() + 8, request.buffers);
  evrdma::putBig32(out.data() + 12, request.size);
  evrdma::putBig64(out.data() + 16, request.count);
  return out;
}

std::string decode(const uint8_t* data, size_t length, const Limits& limits, Request& out) {
  if (data == nullptr || length < kRequestSize || std::memcmp(data, kMagic, 4) != 0) return "not a blast client";
  if (data[4] != kVersion) return "blast protocol version " + std::to_string(data[4]) + " not supported";
  if (data[5] > static_cast<uint8_t>(Mode::Read)) return "unknown mode " + std::to_string(data[5]);
  const uint16_t flags = evrdma::getBig16(data + 6);
  if ((flags & ~1u) != 0) return "unknown flags in the request";
  Request r;
  r.patterned = (flags & 1u) != 0;
  r.mode = static_cast<Mode>(data[5]);
  r.buffers = evrdma::getBig32(data + 8);
  r.size = evrdma::getBig32(data + 12);
  r.count = evrdma::getBig64(data + 16);
  if (r.buffers == 0 || r.buffers > limits.maxBuffers)
    return "buffers " + std::to_string(r.buffers) + " not in 1.." + std::to_string(limits.maxBuffers);
  if (r.size == 0 || r.size > limits.maxSize)
    return "size " + std::to_string(r.size) + " not in 1.." + std::to_string(limits.maxSize);
  if (r.count == 0 || r.count > limits.maxCount)
    return "count " + std::to_string(r.count) + " not in 1.." + std::to_string(limits.maxCount);
  const uint64_t bytes = uint64_t{r.buffers} * r.size;
  if (bytes > limits.maxBytes)
    return "buffers x size = " + std::to_string(r.buffers) + " x " + std::to_string(r.size) + " B = " +
           std::to_string(bytes >> 20) + " MiB, more than the " + std::to_string(limits.maxBytes >> 20) +
           " MiB one client may have";
  out = r;
  return "";
}

}  // namespace blast
