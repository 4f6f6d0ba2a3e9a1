// The echo service of embedded-server: framed evrdma messages, each echoed back as it came. A
// client's message is an 8-byte big-endian sequence number followed by bytes that depend on it,
// so the client can check every byte of every echo.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace echo {

constexpr uint16_t kDefaultPort = 7475;
constexpr size_t kMinMessage = 8;      // the sequence number
constexpr size_t kMaxMessage = 65536;  // both sides' maxMessageSize

// The message with sequence number `seq`, `size` bytes (at least kMinMessage).
void fill(uint8_t* out, size_t size, uint64_t seq) noexcept;
// True if `data` is exactly the message fill() makes for `seq`.
bool check(const uint8_t* data, size_t size, uint64_t seq) noexcept;

}  // namespace echo
