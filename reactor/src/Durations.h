// Durations: a std::chrono duration as libevent's timeval (one conversion for every timer).
#pragma once

#include <sys/time.h>

#include <chrono>

namespace evrdma::detail {

inline timeval timevalOf(std::chrono::microseconds duration) noexcept {
  const auto us = duration.count() < 0 ? 0 : duration.count();
  return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

}  // namespace evrdma::detail
