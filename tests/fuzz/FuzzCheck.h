// What every fuzz target shares: a check that aborts with a message (libFuzzer then saves the
// input that broke it), and a reader that takes fields from the front of the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define FUZZ_CHECK(condition)                                                            \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace fuzz {

// Takes bytes from the front of the input; past its end it gives zeros and empty spans.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  uint8_t byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return v;
  }
  // Up to `n` bytes, in place: `taken` says how many there were.
  const uint8_t* span(size_t n, size_t& taken) {
    taken = n < size_ ? n : size_;
    const uint8_t* at = data_;
    data_ += taken, size_ -= taken;
    return at;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace fuzz
