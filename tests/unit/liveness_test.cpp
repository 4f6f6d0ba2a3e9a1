// Liveness without a device or a loop: when a silent peer is probed, when it is given up, when an
// idle connection ends, and how often the connection must look.
#include "Liveness.h"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using evrdma::detail::Liveness;
using Verdict = Liveness::Verdict;
using namespace std::chrono_literals;

const Liveness::Clock::time_point t0{};

Liveness::Settings keepalive(std::chrono::milliseconds interval, std::chrono::milliseconds timeout = 0ms) {
  return Liveness::Settings{true, interval, timeout, 0ms};
}

TEST(Liveness, AProbeGoesOncePerSilenceAndAnythingHeardStartsTheNextSilence) {
  Liveness liveness(keepalive(100ms, 300ms));
  liveness.start(t0, 0, 0);
  std::chrono::milliseconds silence{};
  EXPECT_EQ(liveness.tick(t0 + 99ms, 0, 0, silence), Verdict::Fine);
  EXPECT_EQ(liveness.tick(t0 + 100ms, 0, 0, silence), Verdict::Probe);
  EXPECT_EQ(liveness.tick(t0 + 150ms, 0, 0, silence), Verdict::Fine) << "one probe per silence";
  EXPECT_EQ(liveness.tick(t0 + 160ms, 1, 0, silence), Verdict::Fine) << "the answer came";
  EXPECT_EQ(liveness.tick(t0 + 259ms, 1, 0, silence), Verdict::Fine);
  EXPECT_EQ(liveness.tick(t0 + 260ms, 1, 0, silence), Verdict::Probe) << "a new silence, a new probe";
}

TEST(Liveness, APeerSilentForTheKeepaliveTimeoutIsGivenUpSayingForHowLong) {
  Liveness liveness(keepalive(100ms, 300ms));
  liveness.start(t0, 5, 0);
  std::chrono::milliseconds silence{};
  EXPECT_EQ(liveness.tick(t0 + 100ms, 5, 0, silence), Verdict::Probe);
  EXPECT_EQ(liveness.tick(t0 + 299ms, 5, 7, silence), Verdict::Fine) << "our own sends prove nothing of the peer";
  EXPECT_EQ(liveness.tick(t0 + 325ms, 5, 7, silence), Verdict::PeerSilent);
  EXPECT_EQ(silence, 325ms);
}

TEST(Liveness, WithoutAKeepaliveTimeoutThePeerGetsThreeIntervals) {
  Liveness liveness(keepalive(100ms));
  EXPECT_EQ(liveness.keepaliveTimeout(), 300ms);
  liveness.start(t0, 0, 0);
  std::chrono::milliseconds silence{};
  EXPECT_EQ(liveness.tick(t0 + 100ms, 0, 0, silence), Verdict::Probe);
  EXPECT_EQ(liveness.tick(t0 + 299ms, 0, 0, silence), Verdict::Fine);
  EXPECT_EQ(liveness.tick(t0 + 300ms, 0, 0, silence), Verdict::PeerSilent);
}

TEST(Liveness, AnIdleTimeoutEndsAConnectionOnWhichNothingMovesAndSparesOneThatMoves) {
  Liveness::Settings settings;
  settings.idleTimeout = 300ms;
  Liveness idle(settings), busy(settings);
  idle.start(t0, 0, 10);
  busy.start(t0, 0, 10);
  std::chrono::milliseconds silence{};
  EXPECT_EQ(idle.tick(t0 + 200ms, 0, 10, silence), Verdict::Fine);
  EXPECT_EQ(busy.tick(t0 + 200ms, 0, 11, silence), Verdict::Fine);
  EXPECT_EQ(idle.tick(t0 + 300ms, 0, 10, silence), Verdict::Idle);
  EXPECT_EQ(busy.tick(t0 + 300ms, 0, 11, silence), Verdict::Fine) << "it moved 100 ms ago";
  EXPECT_EQ(busy.tick(t0 + 499ms, 0, 11, silence), Verdict::Fine);
  EXPECT_EQ(busy.tick(t0 + 500ms, 0, 11, silence), Verdict::Idle);
}

TEST(Liveness, TheTickNoticesEachDeadlineWithinAQuarterOfItAndThereIsNoneWithoutDeadlines) {
  EXPECT_EQ(Liveness(keepalive(100ms)).tickPeriod(), 75ms) << "a quarter of 3 x 100 ms";
  EXPECT_EQ(Liveness(keepalive(100ms, 1000ms)).tickPeriod(), 100ms) << "the interval itself";
  Liveness::Settings idleOnly;
  idleOnly.idleTimeout = 40ms;
  EXPECT_EQ(Liveness(idleOnly).tickPeriod(), 10ms);
  idleOnly.idleTimeout = 2ms;
  EXPECT_EQ(Liveness(idleOnly).tickPeriod(), 1ms) << "never less than a millisecond";
  EXPECT_EQ(Liveness(Liveness::Settings{}).tickPeriod(), 0ms);
  EXPECT_EQ(Liveness(Liveness::Settings{false, 100ms, 0ms, 0ms}).tickPeriod(), 0ms) << "unframed: no keepalive";
}

TEST(Liveness, TicksAlignToAnEighthOfTheirPeriodFromAMillisecondToASecond) {
  EXPECT_EQ(Liveness(keepalive(30000ms)).alignment(), 1000ms) << "22.5 s ticks: at most a second late";
  EXPECT_EQ(Liveness(keepalive(2000ms)).alignment(), 187ms) << "an eighth of 1.5 s";
  EXPECT_EQ(Liveness(keepalive(100ms)).alignment(), 9ms) << "an eighth of 75 ms";
  Liveness::Settings idleOnly;
  idleOnly.idleTimeout = 2ms;
  EXPECT_EQ(Liveness(idleOnly).alignment(), 1ms);
}

}  // namespace
