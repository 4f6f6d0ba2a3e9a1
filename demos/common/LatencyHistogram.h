// Round-trip times in a fixed amount of memory, for medians and percentiles: an average alone is
// pulled up by a few descheduled round trips (under emulation, by a lot), which is why perftest's
// latency tests print t_typical (the median) and percentiles beside t_avg.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace pingpong {

// Log-linear buckets: each power of two of nanoseconds is split into kSubBuckets equal parts, so
// a percentile is exact to within 1/kSubBuckets of its value (under 1 %). Values below
// kSubBuckets ns are exact. Recording is a few instructions and never allocates.
class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;

  void record(std::chrono::nanoseconds duration) noexcept {
    const uint64_t ns = duration.count() > 0 ? static_cast<uint64_t>(duration.count()) : 0;
    ++counts_[indexOf(ns)];
    ++total_;
    if (ns > max_) max_ = ns;
    if (total_ == 1 || ns < min_) min_ = ns;
  }
  uint64_t count() const noexcept { return total_; }
  std::chrono::nanoseconds min() const noexcept { return std::chrono::nanoseconds(min_); }
  std::chrono::nanoseconds max() const noexcept { return std::chrono::nanoseconds(max_); }

  // The value below which `fraction` (0..1) of the recorded ones lie: the middle of its bucket,
  // kept within [min, max]. 0 when nothing was recorded.
  std::chrono::nanoseconds percentile(double fraction) const noexcept {
    if (total_ == 0) return std::chrono::nanoseconds(0);
    if (fraction <= 0) return min();
    if (fraction >= 1) return max();
    // The rank of the value sought, 1-based: the smallest that covers `fraction` of them.
    uint64_t rank = static_cast<uint64_t>(fraction * static_cast<double>(total_));
    if (static_cast<double>(rank) < fraction * static_cast<double>(total_)) ++rank;
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t middle = lowerBound(i) + (width(i) - 1) / 2;
        if (middle < min_) middle = min_;
        if (middle > max_) middle = max_;
        return std::chrono::nanoseconds(middle);
      }
    }
    return max();
  }

 private:
  // Bucket i < kSubBuckets holds the value i; above, each power of two [2^e, 2^(e+1)) for
  // e >= kSubBucketBits has kSubBuckets buckets of width 2^(e - kSubBucketBits).
  static constexpr size_t kBuckets = kSubBuckets * (64 - kSubBucketBits + 1);
  static size_t indexOf(uint64_t ns) noexcept {
    if (ns < kSubBuckets) return static_cast<size_t>(ns);
    const int exponent = 63 - __builtin_clzll(ns);  // >= kSubBucketBits
    const int shift = exponent - kSubBucketBits;
    const uint64_t sub = (ns >> shift) - kSubBuckets;  // 0 .. kSubBuckets-1
    return static_cast<size_t>(kSubBuckets * static_cast<uint64_t>(shift + 1) + sub);
  }
  static uint64_t lowerBound(size_t i) noexcept {
    if (i < kSubBuckets) return i;
    const uint64_t shift = i / kSubBuckets - 1;
    return (kSubBuckets + i % kSubBuckets) << shift;
  }
  static uint64_t width(size_t i) noexcept { return i < kSubBuckets ? 1 : uint64_t{1} << (i / kSubBuckets - 1); }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0, min_ = 0, max_ = 0;
};

}  // namespace pingpong
