// Filling and checking an echo message: the sequence number and the bytes derived from it
// (EchoProtocol.h).
#include "EchoProtocol.h"

#include "evrdma/ByteOrder.h"

namespace echo {

namespace {
uint8_t byteAt(uint64_t seq, size_t i) noexcept { return static_cast<uint8_t>((seq * 131 + i * 7) ^ (i >> 8)); }
}  // namespace

void fill(uint8_t* out, size_t size, uint64_t seq) noexcept {
  evrdma::putBig64(out, seq);
  for (size_t i = kMinMessage; i < size; ++i) out[i] = byteAt(seq, i);
}

bool check(const uint8_t* data, size_t size, uint64_t seq) noexcept {
  if (size < kMinMessage || evrdma::getBig64(data) != seq) return false;
  for (size_t i = kMinMessage; i < size; ++i)
    if (data[i] != byteAt(seq, i)) return false;
  return true;
}

}  // namespace echo
