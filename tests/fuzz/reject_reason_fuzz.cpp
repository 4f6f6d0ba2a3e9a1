// A reject's private data (evrdma/PrivateData.h), as any server may send it: decodeRejectReason
// reads it or says it is not evrdma's; a reason it reads is no longer than the wire allows, and
// encoding it gives bytes that decode to the same reason.
#include <string>
#include <vector>

#include "FuzzCheck.h"
#include "evrdma/PrivateData.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> received(data, data + size);
  std::string reason;
  if (!evrdma::decodeRejectReason(received.data(), received.size(), reason)) return 0;
  FUZZ_CHECK(reason.size() <= evrdma::kMaxRejectReason);
  std::vector<uint8_t> again = evrdma::encodeRejectReason(reason);
  FUZZ_CHECK(again.size() <= 148);  // the smallest reject private data (InfiniBand and RoCE)
  std::string decoded;
  FUZZ_CHECK(evrdma::decodeRejectReason(again.data(), again.size(), decoded));
  FUZZ_CHECK(decoded == reason);
  return 0;
}
