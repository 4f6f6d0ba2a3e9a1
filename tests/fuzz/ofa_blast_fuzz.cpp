// blast-sr-2 (demos/blast/OfaBlast.h) as a hostile peer speaks it: the first input byte picks
// which side reads it. The server reads a client's connect private data (accepted within its
// limits, or the reason it rejects with); the client reads a server's ack (taken only when it
// counts 1 to the messages still unacknowledged, whatever the count's size).
#include <string>
#include <vector>

#include "FuzzCheck.h"
#include "OfaBlast.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  const bool ack = in.byte() & 1;
  const uint64_t unacknowledged = in.u64();
  size_t length = 0;
  const uint8_t* at = in.span(size, length);
  std::vector<uint8_t> received(at, at + length);
  if (ack) {
    uint64_t count = 0;
    if (blast::ofa::readAck(received.data(), received.size(), unacknowledged, count).empty())
      FUZZ_CHECK(count >= 1 && count <= unacknowledged && received.size() == blast::ofa::kAckSize);
    return 0;
  }
  const blast::ofa::Limits limits;
  blast::ofa::Request request;
  if (!blast::ofa::decode(received.data(), received.size(), limits, request).empty()) return 0;
  FUZZ_CHECK(request.limit >= 1 && request.limit <= limits.maxLimit);
  FUZZ_CHECK(request.dataSize >= 1 && request.dataSize <= limits.maxDataSize);
  FUZZ_CHECK(request.buffers >= 1 && request.buffers <= limits.maxBuffers);
  FUZZ_CHECK(blast::ofa::ackThreshold(request.buffers) >= 1);
  return 0;
}
