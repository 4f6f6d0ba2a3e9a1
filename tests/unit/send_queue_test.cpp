// SendQueue without a device: the verbs post is a fake that records what it was given.
#include "SendQueue.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <new>
#include <vector>

// Every allocation of this test program is counted, so a test can show the send path makes none.
namespace {
size_t allocations = 0;
}
// Never inlined: GCC 12 would see a vector's memory from `new` reach free() and warn of a mismatch.
__attribute__((noinline)) void* operator new(std::size_t size) {
  ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using evrdma::OpType;
using evrdma::SendOp;
using evrdma::SendQueue;

struct PostedWr {
  uint64_t wrId;
  ibv_wr_opcode opcode;
  unsigned flags;
  uint64_t tagOfAddr;  // the test puts the tag in sge.addr
  int numSge;
  std::vector<uint64_t> sgeAddrs;
};

class SendQueueTest : public ::testing::Test {
 protected:
  SendQueue make(uint32_t depth, uint32_t signalEvery, uint32_t maxInline = 0) {
    return SendQueue(depth, signalEvery, maxInline, 0, [this](ibv_send_wr* wr, ibv_send_wr** bad) {
      ++posts;
      if (failNextPost) {
        *bad = wr;
        return EIO;
      }
      for (; wr != nullptr; wr = wr->next) {
        std::vector<uint64_t> addrs;
        for (int i = 0; i < wr->num_sge; ++i) addrs.push_back(wr->sg_list[i].addr);
        posted.push_back({wr->wr_id, wr->opcode, wr->send_flags, wr->num_sge ? wr->sg_list[0].addr : 0, wr->num_sge,
                          addrs});
      }
      return 0;
    });
  }
  static SendOp op(uint64_t tag, OpType type = OpType::Send, uint32_t length = 100) {
    SendOp o;
    o.type = type;
    o.tag = tag;
    o.sge.addr = tag;
    o.sge.length = length;
    return o;
  }
  static ibv_wc wcFor(const PostedWr& wr, ibv_wc_status status = IBV_WC_SUCCESS) {
    ibv_wc wc{};
    wc.wr_id = wr.wrId;
    wc.status = status;
    return wc;
  }
  std::vector<PostedWr> posted;
  std::vector<std::pair<uint64_t, ibv_wc_status>> completed;
  SendQueue::Done record = [this](const SendOp& o, ibv_wc_status s) { completed.emplace_back(o.tag, s); };
  int posts = 0;
  bool failNextPost = false;
};

TEST_F(SendQueueTest, NeverPostsMoreThanTheQueueHoldsAndDrainsTheBacklogInOrder) {
  SendQueue q = make(2, 1);
  for (uint64_t tag = 1; tag <= 5; ++tag) ASSERT_EQ(q.submit(op(tag)), 0);
  EXPECT_EQ(q.inFlight(), 2u);
  EXPECT_EQ(q.backlog(), 3u);
  std::vector<uint64_t> order;  // the completions after which the backlog had just drained
  for (size_t i = 0; i < posted.size(); ++i) {
    const bool hadBacklog = q.backlog() > 0;
    ASSERT_EQ(q.complete(wcFor(posted[i]), record), 0);
    EXPECT_LE(q.inFlight(), 2u);
    if (hadBacklog && q.backlog() == 0) order.push_back(i);
  }
  ASSERT_EQ(posted.size(), 5u);
  for (size_t i = 0; i < posted.size(); ++i) EXPECT_EQ(posted[i].tagOfAddr, i + 1) << "posted out of order";
  ASSERT_EQ(completed.size(), 5u);
  for (size_t i = 0; i < completed.size(); ++i) EXPECT_EQ(completed[i].first, i + 1);
  EXPECT_EQ(order.size(), 1u) << "the backlog drains exactly once";
  EXPECT_EQ(q.backlog(), 0u);
  EXPECT_EQ(q.inFlight(), 0u);
}

TEST_F(SendQueueTest, SignalsEveryNthAndTheLastOfEachPost) {
  SendQueue q = make(16, 4);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 10; ++tag) q.submit(op(tag));
  EXPECT_TRUE(posted.empty()) << "nothing goes out before endBatch";
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posts, 1) << "a batch is one ibv_post_send";
  ASSERT_EQ(posted.size(), 10u);
  std::vector<size_t> signaled;
  for (size_t i = 0; i < posted.size(); ++i)
    if (posted[i].flags & IBV_SEND_SIGNALED) signaled.push_back(i);
  EXPECT_EQ(signaled, (std::vector<size_t>{3, 7, 9}));
}

TEST_F(SendQueueTest, TheRequestThatFillsTheQueueIsSignaled) {
  SendQueue q = make(3, 100);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 5; ++tag) q.submit(op(tag));
  q.endBatch();
  ASSERT_EQ(posted.size(), 3u);
  EXPECT_TRUE(posted[2].flags & IBV_SEND_SIGNALED);
  EXPECT_FALSE(posted[0].flags & IBV_SEND_SIGNALED);
}

TEST_F(SendQueueTest, OneSignaledCompletionCompletesTheUnsignaledBeforeIt) {
  SendQueue q = make(16, 4);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 4; ++tag) q.submit(op(tag));
  q.endBatch();
  ASSERT_EQ(q.complete(wcFor(posted[3]), record), 0);
  ASSERT_EQ(completed.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(completed[i].first, i + 1);
    EXPECT_EQ(completed[i].second, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(q.inFlight(), 0u);
}

TEST_F(SendQueueTest, AnErrorCompletesTheEarlierRequestsAndReportsItsOwn) {
  SendQueue q = make(16, 16);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 4; ++tag) q.submit(op(tag));
  q.endBatch();
  q.complete(wcFor(posted[1], IBV_WC_REM_ACCESS_ERR), record);
  ASSERT_EQ(completed.size(), 2u);
  EXPECT_EQ(completed[0].second, IBV_WC_SUCCESS);
  EXPECT_EQ(completed[1].second, IBV_WC_REM_ACCESS_ERR);
  q.complete(wcFor(posted[3], IBV_WC_WR_FLUSH_ERR), record);  // the rest flush
  ASSERT_EQ(completed.size(), 4u);
  q.complete(wcFor(posted[2], IBV_WC_WR_FLUSH_ERR), record);  // already counted: ignored
  EXPECT_EQ(completed.size(), 4u);
  EXPECT_EQ(q.inFlight(), 0u);
}

TEST_F(SendQueueTest, InlinesSmallSendsAndWritesButNeverReads) {
  SendQueue q = make(8, 1, 64);
  q.submit(op(1, OpType::Send, 64));
  q.submit(op(2, OpType::Write, 64));
  q.submit(op(3, OpType::Read, 8));
  q.submit(op(4, OpType::Send, 65));
  ASSERT_EQ(posted.size(), 4u);
  EXPECT_TRUE(posted[0].flags & IBV_SEND_INLINE);
  EXPECT_TRUE(posted[1].flags & IBV_SEND_INLINE);
  EXPECT_FALSE(posted[2].flags & IBV_SEND_INLINE);
  EXPECT_FALSE(posted[3].flags & IBV_SEND_INLINE);
  EXPECT_EQ(posted[1].opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(posted[2].opcode, IBV_WR_RDMA_READ);
}

TEST_F(SendQueueTest, AFailedPostIsReportedAsMinusErrno) {
  SendQueue q = make(8, 1);
  failNextPost = true;
  EXPECT_EQ(q.submit(op(1)), -EIO);
  EXPECT_EQ(q.inFlight(), 0u);
}

TEST_F(SendQueueTest, AFrameHeaderGoesFirstAndCountsTowardsInline) {
  SendQueue q = make(4, 1, 64);
  SendOp framed = op(7, OpType::Send, 40);
  framed.header.addr = 1000;
  framed.header.length = 16;
  SendOp bigger = op(8, OpType::Send, 60);
  bigger.header = framed.header;
  ASSERT_EQ(q.submit(framed), 0);
  ASSERT_EQ(q.submit(bigger), 0);
  ASSERT_EQ(posted.size(), 2u);
  EXPECT_EQ(posted[0].numSge, 2);
  EXPECT_EQ(posted[0].sgeAddrs, (std::vector<uint64_t>{1000, 7}));
  EXPECT_TRUE(posted[0].flags & IBV_SEND_INLINE) << "16 + 40 bytes fit in 64";
  EXPECT_FALSE(posted[1].flags & IBV_SEND_INLINE) << "16 + 60 bytes do not";
}

TEST_F(SendQueueTest, NestedBatchesGoOutWhenTheOutermostEnds) {
  SendQueue q = make(16, 4);
  q.beginBatch();
  ASSERT_EQ(q.submit(op(1)), 0);
  q.beginBatch();  // e.g. the application's batch inside the library's
  ASSERT_EQ(q.submit(op(2)), 0);
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_TRUE(posted.empty()) << "the outer batch is still open";
  ASSERT_EQ(q.submit(op(3)), 0);
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posts, 1);
  EXPECT_EQ(posted.size(), 3u);
  ASSERT_EQ(q.endBatch(), 0) << "an unmatched end is harmless";
  ASSERT_EQ(q.submit(op(4)), 0);
  EXPECT_EQ(posted.size(), 4u) << "and does not leave a batch open";
}

// After a poll that found one message, the connection's batch posts its first request at once
// (the answer a ping-pong peer waits for) and still batches the rest.
TEST_F(SendQueueTest, ABatchAskedToPostItsFirstRequestAtOncePostsItInsideTheBatchAndTheRestAtItsEnd) {
  SendQueue q = make(16, 4);
  q.beginBatch(true);
  ASSERT_EQ(q.submit(op(1)), 0);
  ASSERT_EQ(posted.size(), 1u) << "the first request went out before the batch ended";
  EXPECT_TRUE(posted[0].flags & IBV_SEND_SIGNALED) << "the last of its post";
  ASSERT_EQ(q.submit(op(2)), 0);
  ASSERT_EQ(q.submit(op(3)), 0);
  EXPECT_EQ(posted.size(), 1u) << "the rest wait for the batch's end";
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posts, 2);
  ASSERT_EQ(posted.size(), 3u);
  for (size_t i = 0; i < posted.size(); ++i) EXPECT_EQ(posted[i].tagOfAddr, i + 1) << "in order";
  q.beginBatch();  // the next batch is an ordinary one again
  ASSERT_EQ(q.submit(op(4)), 0);
  EXPECT_EQ(posted.size(), 3u);
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posted.size(), 4u);
}

TEST_F(SendQueueTest, AnApplicationsBatchInsideTurnsPostingAtOnceOff) {
  SendQueue q = make(16, 4);
  q.beginBatch(true);
  q.beginBatch();  // the application batches its sends on purpose
  ASSERT_EQ(q.submit(op(1)), 0);
  ASSERT_EQ(q.submit(op(2)), 0);
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_TRUE(posted.empty());
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posts, 1);
  EXPECT_EQ(posted.size(), 2u);
}

TEST_F(SendQueueTest, PostingAtOnceNeverOvertakesWhatWaitsForRoom) {
  SendQueue q = make(2, 1);
  ASSERT_EQ(q.submit(op(1)), 0);
  ASSERT_EQ(q.submit(op(2)), 0);
  ASSERT_EQ(q.submit(op(3)), 0);  // no room: waits
  ASSERT_EQ(posted.size(), 2u);
  q.beginBatch(true);
  ASSERT_EQ(q.submit(op(4)), 0);
  EXPECT_EQ(posted.size(), 2u) << "3 waits ahead of it";
  ASSERT_EQ(q.complete(wcFor(posted[0]), record), 0);  // room for 3, posted, 4 waits for the batch's end
  ASSERT_EQ(q.endBatch(), 0);
  ASSERT_EQ(q.complete(wcFor(posted[1]), record), 0);
  ASSERT_EQ(posted.size(), 4u);
  for (size_t i = 0; i < posted.size(); ++i) EXPECT_EQ(posted[i].tagOfAddr, i + 1) << "in order";
}

// A batch holds its requests in the backlog until it ends: once every poll of a busy connection
// does that, the backlog must not allocate per request as it fills and drains (std::deque freed
// and allocated a block every few requests).
TEST_F(SendQueueTest, BatchesThatFillAndDrainTheBacklogAllocateNothingOnceWarm) {
  std::vector<uint64_t> wrIds;
  wrIds.reserve(16);
  SendQueue q(16, 4, 0, 0, [&wrIds](ibv_send_wr* wr, ibv_send_wr**) {
    for (; wr != nullptr; wr = wr->next) wrIds.push_back(wr->wr_id);
    return 0;
  });
  size_t done = 0;
  SendQueue::Done count = [&done](const SendOp&, ibv_wc_status) { ++done; };
  auto round = [&](uint64_t perBatch) {
    q.beginBatch();
    for (uint64_t i = 0; i < perBatch; ++i) ASSERT_EQ(q.submit(op(i)), 0);
    ASSERT_EQ(q.endBatch(), 0);
    ibv_wc wc{};
    wc.wr_id = wrIds.back();
    wc.status = IBV_WC_SUCCESS;
    ASSERT_EQ(q.complete(wc, count), 0);
    ASSERT_EQ(q.inFlight(), 0u);
    wrIds.clear();
  };
  for (int i = 0; i < 4; ++i) round(1 + i % 3);  // warm: the backlog grows to its largest size
  const size_t before = allocations;
  for (int i = 0; i < 3000; ++i) round(1 + i % 3);
  EXPECT_EQ(allocations - before, 0u) << "allocations in 3000 batches of 1-3 requests";
  EXPECT_EQ(done, 7u + 6000u) << "every request completed";
}

TEST_F(SendQueueTest, ACompletionsCallbackThatFillsTheQueueAgainStillReadsItsOwnRequest) {
  constexpr uint32_t kDepth = 4;
  SendQueue q = make(kDepth, kDepth);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= kDepth; ++tag) q.submit(op(tag));
  q.endBatch();
  ASSERT_EQ(q.inFlight(), kDepth);
  // Each callback posts a new request before it looks at the one it was handed (an echo that
  // answers first): the first one fills the queue to its depth again.
  std::vector<uint64_t> seen;
  uint64_t next = 100;
  auto postThenRead = [&](const SendOp& done, ibv_wc_status) {
    ASSERT_EQ(q.submit(op(next++)), 0);
    seen.push_back(done.tag);
  };
  ASSERT_EQ(q.complete(wcFor(posted[kDepth - 1]), postThenRead), 0);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3, 4})) << "a request was overwritten while its callback ran";
  EXPECT_EQ(q.inFlight(), kDepth);
}

// A batch whose requests fit in the send queue keeps them in the ring's free slots until it ends:
// no backlog is made (a backlog keeps its storage: 8 requests, 704 B, in every connection that
// ever answered inside a completion pass, 100 000 of them idle).
TEST_F(SendQueueTest, ABatchThatFitsWaitsInTheRingAndAllocatesNothingEvenTheFirstTime) {
  SendQueue q = make(4, 4);
  const size_t before = allocations;
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 4; ++tag) ASSERT_EQ(q.submit(op(tag)), 0);
  EXPECT_EQ(allocations - before, 0u) << "a batch that fits allocated";
  EXPECT_EQ(q.backlog(), 0u);
  EXPECT_TRUE(posted.empty());
  ASSERT_EQ(q.endBatch(), 0);
  EXPECT_EQ(posts, 1);
  ASSERT_EQ(posted.size(), 4u);
  for (size_t i = 0; i < posted.size(); ++i) EXPECT_EQ(posted[i].tagOfAddr, i + 1) << "in order";
  EXPECT_EQ(q.inFlight(), 4u);
}

// A batch larger than the room: the first ones wait in the ring, the rest in the backlog, and they
// go out in the order given, as room comes; a request outside the batch never overtakes them.
TEST_F(SendQueueTest, ABatchPastTheRoomGoesOutInOrderAsRoomComes) {
  SendQueue q = make(3, 1);
  ASSERT_EQ(q.submit(op(1)), 0);  // in flight: room for 2 more
  q.beginBatch();
  for (uint64_t tag = 2; tag <= 6; ++tag) ASSERT_EQ(q.submit(op(tag)), 0);
  EXPECT_EQ(q.backlog(), 3u) << "two fit, three wait for room";
  ASSERT_EQ(q.endBatch(), 0);
  ASSERT_EQ(posted.size(), 3u);
  ASSERT_EQ(q.submit(op(7)), 0);  // outside any batch: behind the backlog
  EXPECT_EQ(posted.size(), 3u);
  for (size_t done = 0; posted.size() < 7; ++done) {
    ASSERT_LT(done, posted.size());
    ASSERT_EQ(q.complete(wcFor(posted[done]), record), 0);
  }
  for (size_t i = 0; i < posted.size(); ++i) EXPECT_EQ(posted[i].tagOfAddr, i + 1) << "in order";
}

// A post that fails leaves a batch's requests to the teardown, in order: those staged in the ring,
// then the backlog's.
TEST_F(SendQueueTest, AFailedBatchPostLeavesEveryRequestToTheTeardownInOrder) {
  SendQueue q = make(2, 1);
  q.beginBatch();
  for (uint64_t tag = 1; tag <= 4; ++tag) ASSERT_EQ(q.submit(op(tag)), 0);
  failNextPost = true;
  EXPECT_EQ(q.endBatch(), -EIO);
  EXPECT_EQ(q.inFlight(), 0u);
  std::deque<SendOp> taken = q.takeBacklog();
  ASSERT_EQ(taken.size(), 4u);
  for (size_t i = 0; i < taken.size(); ++i) EXPECT_EQ(taken[i].tag, i + 1) << "in order";
  EXPECT_EQ(q.takeBacklog().size(), 0u) << "taken once";
}

}  // namespace
