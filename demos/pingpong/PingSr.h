// The ping-sr wire protocol of the OFA notes (ping-sr-1): the client's connect private data is
// 16 bytes, {uint64 count, uint64 data_size} in network byte order; then the client sends
// `data_size`-byte messages and the agent echoes each one back, `count` times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pingsr {

constexpr uint16_t kDefaultPort = 12321;
constexpr size_t kConnectInfoSize = 16;

struct ConnectInfo {
  uint64_t count = 0;
  uint64_t dataSize = 0;
};

// What a server accepts; anything outside is rejected with a reason.
struct Limits {
  uint64_t maxCount = 1000000000;     // round trips per connection
  uint64_t maxDataSize = 16u << 20;   // bytes per message
};

std::vector<uint8_t> encode(const ConnectInfo& info);

// Reads the connect private data. The transport may pad it (InfiniBand and RoCE deliver 56 bytes),
// so only the first 16 bytes count and extra bytes are ignored. Returns "" when the values are
// acceptable, else the reason to reject (short data, zero or too large a count or size).
std::string parse(const uint8_t* data, size_t length, const Limits& limits, ConnectInfo& out);

}  // namespace pingsr
