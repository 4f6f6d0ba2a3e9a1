// The connect private data of a ping-sr client (demos/pingpong/PingSr.h), as any client may send
// it: pingpong-server's parse accepts it within its limits or gives the reason it rejects with.
#include <string>
#include <vector>

#include "FuzzCheck.h"
#include "PingSr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> received(data, data + size);
  const pingsr::Limits limits;
  pingsr::ConnectInfo info;
  const std::string refused = pingsr::parse(received.data(), received.size(), limits, info);
  if (!refused.empty()) return 0;
  FUZZ_CHECK(info.count >= 1 && info.count <= limits.maxCount);
  FUZZ_CHECK(info.dataSize >= 1 && info.dataSize <= limits.maxDataSize);
  std::vector<uint8_t> again = pingsr::encode(info);
  pingsr::ConnectInfo decoded;
  FUZZ_CHECK(pingsr::parse(again.data(), again.size(), limits, decoded).empty());
  FUZZ_CHECK(decoded.count == info.count && decoded.dataSize == info.dataSize);
  return 0;
}
