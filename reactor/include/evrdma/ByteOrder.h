/// \file
/// Big-endian (network order) loads and stores of wire fields at any alignment: for the private
/// data and message formats an application defines (evrdma's own frames use them too).
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace evrdma {

inline void putBig64(uint8_t* out, uint64_t v) noexcept {
  v = htobe64(v);
  std::memcpy(out, &v, 8);
}
inline void putBig32(uint8_t* out, uint32_t v) noexcept {
  v = htobe32(v);
  std::memcpy(out, &v, 4);
}
inline void putBig16(uint8_t* out, uint16_t v) noexcept {
  v = htobe16(v);
  std::memcpy(out, &v, 2);
}
inline uint64_t getBig64(const uint8_t* in) noexcept {
  uint64_t v;
  std::memcpy(&v, in, 8);
  return be64toh(v);
}
inline uint32_t getBig32(const uint8_t* in) noexcept {
  uint32_t v;
  std::memcpy(&v, in, 4);
  return be32toh(v);
}
inline uint16_t getBig16(const uint8_t* in) noexcept {
  uint16_t v;
  std::memcpy(&v, in, 2);
  return be16toh(v);
}

}  // namespace evrdma
