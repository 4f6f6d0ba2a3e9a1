// LatencyHistogram: the percentiles pingpong-client prints, within the promised 1 %.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>

#include "LatencyHistogram.h"

using namespace std::chrono_literals;
using pingpong::LatencyHistogram;

namespace {

double withinPercent(std::chrono::nanoseconds got, double expected) {
  return std::fabs(static_cast<double>(got.count()) - expected) / expected * 100;
}

TEST(LatencyHistogram, NothingRecordedGivesZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.percentile(0.5), 0ns);
}

TEST(LatencyHistogram, SmallValuesAreExact) {
  LatencyHistogram h;
  for (int i = 1; i <= 100; ++i) h.record(std::chrono::nanoseconds(i));
  EXPECT_EQ(h.percentile(0.5), 50ns);   // the 50th of 100
  EXPECT_EQ(h.percentile(0.99), 99ns);  // the 99th
  EXPECT_EQ(h.percentile(0.995), 100ns);  // 99.5 of them are not enough: the 100th
  EXPECT_EQ(h.min(), 1ns);
  EXPECT_EQ(h.max(), 100ns);
}

TEST(LatencyHistogram, PercentilesOfMicrosecondsAreWithinOnePercent) {
  LatencyHistogram h;
  for (int i = 1; i <= 10000; ++i) h.record(std::chrono::nanoseconds(i * 1000));  // 1 us .. 10 ms
  EXPECT_EQ(h.count(), 10000u);
  EXPECT_LT(withinPercent(h.percentile(0.5), 5000e3), 1.0);
  EXPECT_LT(withinPercent(h.percentile(0.99), 9900e3), 1.0);
  EXPECT_LT(withinPercent(h.percentile(0.999), 9990e3), 1.0);
  EXPECT_EQ(h.percentile(1.0), 10ms);
  EXPECT_EQ(h.percentile(0.0), 1us);
}

TEST(LatencyHistogram, TheMedianIgnoresAFewHugeOutliers) {
  LatencyHistogram h;
  for (int i = 0; i < 990; ++i) h.record(40us);
  for (int i = 0; i < 10; ++i) h.record(50ms);  // a descheduled round trip or ten
  EXPECT_LT(withinPercent(h.percentile(0.5), 40e3), 1.0);
  EXPECT_LT(withinPercent(h.percentile(0.995), 50e6), 1.0);
  EXPECT_EQ(h.max(), 50ms);
}

TEST(LatencyHistogram, TheLargestDurationsFitAndNegativeOnesCountAsZero) {
  LatencyHistogram h;
  h.record(std::chrono::nanoseconds(INT64_MAX));
  h.record(-5ns);
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.min(), 0ns);
  EXPECT_EQ(h.percentile(1.0), std::chrono::nanoseconds(INT64_MAX));
  EXPECT_EQ(h.percentile(0.5), 0ns);
}

}  // namespace
