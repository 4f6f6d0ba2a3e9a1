// Encoding and decoding ping-sr's 16-byte connect request (PingSr.h).
#include "PingSr.h"

#include <endian.h>

#include <cstring>

#include "evrdma/PrivateData.h"

namespace pingsr {

std::vector<uint8_t> encode(const ConnectInfo& info) { return evrdma::pingSrConnectData(info.count, info.dataSize); }

std::string parse(const uint8_t* data, size_t length, const Limits& limits, ConnectInfo& out) {
  if (data == nullptr || length < kConnectInfoSize)
    return "ping-sr needs 16 bytes of private data {count, data_size}, got " + std::to_string(data ? length : 0);
  uint64_t count = 0, size = 0;
  std::memcpy(&count, data, 8);
  std::memcpy(&size, data + 8, 8);
  out.count = be64toh(count);
  out.dataSize = be64toh(size);
  // RoCE and InfiniBand pad private data with zeros to 56 bytes: short data arrives as count 0.
  if (out.count == 0)
    return length > kConnectInfoSize ? "count 0 (or fewer than the 16 bytes {count, data_size} were sent: the "
                                       "transport pads private data with zeros): nothing to ping-pong"
                                     : "count 0: nothing to ping-pong";
  if (out.count > limits.maxCount)
    return "count " + std::to_string(out.count) + " is over this server's limit of " + std::to_string(limits.maxCount);
  if (out.dataSize == 0) return "data_size 0: messages must carry at least 1 byte";
  if (out.dataSize > limits.maxDataSize)
    return "data_size " + std::to_string(out.dataSize) + " is over this server's limit of " +
           std::to_string(limits.maxDataSize) + " bytes";
  return "";
}

}  // namespace pingsr
