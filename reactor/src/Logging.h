// The library's side of evrdma/Log.h: logf() formats and reports a message when its level is
// wanted. The level test is one relaxed atomic load, so a message nobody wants costs no formatting.
#pragma once

#include <atomic>

#include "evrdma/Log.h"

namespace evrdma::detail {

extern std::atomic<int> minimumLogLevel;

inline bool logWanted(LogLevel level) noexcept {
  return static_cast<int>(level) >= minimumLogLevel.load(std::memory_order_relaxed);
}

// printf-style; truncated at 512 bytes.
void logMessage(LogLevel level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));

}  // namespace evrdma::detail

#define EVRDMA_LOG(level, ...)                                                        \
  do {                                                                                \
    if (::evrdma::detail::logWanted(level)) ::evrdma::detail::logMessage(level, __VA_ARGS__); \
  } while (0)
