// AdmittedLine without a device: which accepted request is set up next under the bound on memory
// pinned for agents not yet established, and how large buffers are populated a piece per turn.
#include "AdmittedLine.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "QueuePair.h"

namespace {

using evrdma::detail::AdmittedLine;

// Ids are only compared here, never used: made-up addresses.
rdma_cm_id* fakeId(uintptr_t n) { return reinterpret_cast<rdma_cm_id*>(n * 64); }

evrdma::AcceptDecision asking(size_t maxMessageSize) {
  evrdma::ConnectionOptions options;
  options.maxMessageSize = maxMessageSize;
  return evrdma::AcceptDecision::accept(nullptr, options);
}

uint64_t pinnedFor(size_t maxMessageSize) {
  return evrdma::detail::QueuePair::memoryNeeds(asking(maxMessageSize).options).pinned;
}

constexpr uint64_t kNoLimitPerTurn = uint64_t{1} << 40;

TEST(AdmittedLine, ALargeRequestThatDoesNotFitLetsASmallerOneBehindItGoFirst) {
  evrdma::ListenerStats stats;
  AdmittedLine line(stats);
  const uint64_t large = pinnedFor(1 << 20), small = pinnedFor(64);
  const uint64_t bound = 2 * large;  // large requests share three quarters of it: one at a time
  ASSERT_LT(small, bound / 8);
  line.push(fakeId(1), asking(1 << 20), false);
  line.push(fakeId(2), asking(1 << 20), false);
  line.push(fakeId(3), asking(64), false);

  AdmittedLine::Request ready;
  ASSERT_EQ(line.step(bound, kNoLimitPerTurn, ready), AdmittedLine::Step::Ready);
  EXPECT_EQ(ready.id, fakeId(1));
  EXPECT_EQ(line.unestablishedBytes(), large);
  ASSERT_EQ(line.step(bound, kNoLimitPerTurn, ready), AdmittedLine::Step::Ready);
  EXPECT_EQ(ready.id, fakeId(3)) << "the small request waited behind a large one that does not fit";
  EXPECT_EQ(stats.heldForMemory, 1u);
  EXPECT_EQ(line.step(bound, kNoLimitPerTurn, ready), AdmittedLine::Step::WaitsForMemory);
  EXPECT_EQ(stats.heldForMemory, 1u) << "a request is counted once, however often it waits";

  EXPECT_TRUE(line.giveBack(large)) << "the first agent established: the waiting one may fit";
  ASSERT_EQ(line.step(bound, kNoLimitPerTurn, ready), AdmittedLine::Step::Ready);
  EXPECT_EQ(ready.id, fakeId(2));
  EXPECT_EQ(stats.mostUnestablishedMemory, large + small);
}

TEST(AdmittedLine, ARequestLargerThanTheBoundGoesWhenNoOtherHoldsAny) {
  evrdma::ListenerStats stats;
  AdmittedLine line(stats);
  const uint64_t large = pinnedFor(1 << 20);
  line.push(fakeId(1), asking(1 << 20), false);
  line.push(fakeId(2), asking(1 << 20), false);
  AdmittedLine::Request ready;
  ASSERT_EQ(line.step(large / 2, kNoLimitPerTurn, ready), AdmittedLine::Step::Ready);
  EXPECT_EQ(line.step(large / 2, kNoLimitPerTurn, ready), AdmittedLine::Step::WaitsForMemory);
}

TEST(AdmittedLine, LargeBuffersArePopulatedAPiecePerTurnBeforeTheRequestIsReady) {
  evrdma::ListenerStats stats;
  AdmittedLine line(stats);
  const uint64_t perTurn = 1 << 20;
  line.push(fakeId(1), asking(4 << 20), false);  // rings of several MiB, registered on their own
  AdmittedLine::Request ready;
  int turns = 1;
  AdmittedLine::Step step;
  while ((step = line.step(uint64_t{1} << 40, perTurn, ready)) == AdmittedLine::Step::NextTurn) {
    line.startTurn();
    ++turns;
  }
  ASSERT_EQ(step, AdmittedLine::Step::Ready);
  ASSERT_NE(ready.prepared, nullptr);
  EXPECT_TRUE(ready.prepared->populated());
  EXPECT_GT(turns, 4) << "several MiB populated in a few turns: the piece per turn was not kept";
  EXPECT_LE(stats.mostPopulatedInOneTurn, perTurn);
  EXPECT_EQ(stats.populatedAhead % 4096, 0u);
  EXPECT_GE(stats.populatedAhead, uint64_t{4} << 20);
}

TEST(AdmittedLine, ARequestTakenOutWhileItsBuffersArePopulatedGivesBackWhatItHeld) {
  evrdma::ListenerStats stats;
  AdmittedLine line(stats);
  line.push(fakeId(1), asking(4 << 20), false);
  AdmittedLine::Request ready, taken;
  ASSERT_EQ(line.step(uint64_t{1} << 40, 1 << 20, ready), AdmittedLine::Step::NextTurn);
  EXPECT_EQ(line.unestablishedBytes(), pinnedFor(4 << 20));
  ASSERT_TRUE(line.take(fakeId(1), taken)) << "its client gave up";
  EXPECT_EQ(line.unestablishedBytes(), 0u);
  EXPECT_TRUE(line.empty());
  line.push(fakeId(2), asking(64), true);
  EXPECT_FALSE(line.take(fakeId(2), taken)) << "a handed-over request's events no longer come to the listening side";
  ASSERT_TRUE(line.takeFront(taken));
  EXPECT_EQ(taken.id, fakeId(2));
}

}  // namespace
