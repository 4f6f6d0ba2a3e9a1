// The connect private data of a blast client (demos/blast/BlastProtocol.h), as any client may send
// it: blast-server's decode accepts it within its limits or gives the reason it rejects with.
#include <string>
#include <vector>

#include "BlastProtocol.h"
#include "FuzzCheck.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> received(data, data + size);
  const blast::Limits limits;
  blast::Request request;
  const std::string refused = blast::decode(received.data(), received.size(), limits, request);
  if (!refused.empty()) return 0;
  FUZZ_CHECK(request.buffers >= 1 && request.buffers <= limits.maxBuffers);
  FUZZ_CHECK(request.size >= 1 && request.size <= limits.maxSize);
  FUZZ_CHECK(request.count >= 1 && request.count <= limits.maxCount);
  FUZZ_CHECK(uint64_t{request.buffers} * request.size <= limits.maxBytes);
  FUZZ_CHECK(request.mode <= blast::Mode::Read);
  std::vector<uint8_t> again = blast::encode(request);
  blast::Request decoded;
  FUZZ_CHECK(blast::decode(again.data(), again.size(), limits, decoded).empty());
  FUZZ_CHECK(decoded.mode == request.mode && decoded.buffers == request.buffers && decoded.size == request.size &&
             decoded.count == request.count && decoded.patterned == request.patterned);
  return 0;
}
