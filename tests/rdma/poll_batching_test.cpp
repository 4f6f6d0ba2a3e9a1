// Poll batching over real RDMA: what the callbacks of one poll's completions send goes to the
// device as one post (one ibv_post_send, one doorbell system call on soft-RoCE, one signaled
// request), at the end of that poll, and still arrives whole and in order; but the answer to the
// only message a poll found goes out at once, from inside its callback. (What either gains, message
// rate or latency, is measured by make bench, not here.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "evrdma/Agent.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "rdma/EchoPair.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;
using evrdma::test::runUntil;

constexpr int kBurst = 16, kBursts = 100;

// Sends bursts of kBurst numbered messages in one post each; the next burst once all came back.
// Checks that every echo is the message sent in that place.
struct BurstSender : evrdma::ConnectionHandler {
  int sent = 0, echoed = 0, misordered = 0;
  bool failed = false;
  void onEstablished(evrdma::Connection& c) noexcept override { burst(c); }
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    int number = -1;
    if (length == sizeof number) std::memcpy(&number, data, sizeof number);
    if (number != echoed) ++misordered;
    if (++echoed == sent && sent < kBurst * kBursts) burst(c);
  }
  void burst(evrdma::Connection& c) {
    c.beginBatch();
    for (int i = 0; i < kBurst; ++i, ++sent)
      if (c.postSend(&sent, sizeof sent) != 0) failed = true;
    if (c.endBatch() != 0) failed = true;
  }
  void onError(evrdma::Connection&, int, const char*) noexcept override { failed = true; }
};

TEST(PollBatching, EchoesSentFromOnePollsCallbacksGoToTheDeviceInOnePost) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor reactor;
  ASSERT_TRUE(reactor.valid());
  evrdma::test::EchoFactory factory;  // echoes each message from its onRecv, one postSend each
  factory.options.framed = true;
  factory.options.maxMessageSize = 64;
  factory.options.recvDepth = 4 * kBurst;
  factory.options.sendDepth = 4 * kBurst;  // room to spare: nothing ever waits for the send queue
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);

  auto owned = std::make_unique<BurstSender>();
  BurstSender* sender = owned.get();
  evrdma::ClientOptions options = evrdma::test::framedClient();
  options.maxMessageSize = 64;
  options.recvDepth = 4 * kBurst;
  options.sendDepth = 4 * kBurst;
  evrdma::Client::Ptr client = evrdma::Client::create(reactor, std::move(owned), options);
  ASSERT_EQ(client->connect(bed.ip, listener->port()), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return sender->echoed == kBurst * kBursts || sender->failed; }, 120s));
  EXPECT_FALSE(sender->failed);
  EXPECT_EQ(sender->misordered, 0);

  evrdma::SendQueueStats agent;
  int agents = 0;
  listener->forEachAgent([&](evrdma::Agent& a) {
    agent = a.sendQueueStats();
    ++agents;
  });
  ASSERT_EQ(agents, 1);
  std::printf("agent: %llu requests (%d echoes and the credit frames) in %llu posts, %llu signaled\n",
              static_cast<unsigned long long>(agent.requests), kBurst * kBursts,
              static_cast<unsigned long long>(agent.posts), static_cast<unsigned long long>(agent.signaled));
  // Each echo is a postSend of its own into a send queue with room: posted at once, that would be
  // one post per request. Polls that find several messages post their echoes together.
  EXPECT_GE(agent.requests, static_cast<uint64_t>(kBurst * kBursts));
  EXPECT_LT(agent.posts, agent.requests);
  EXPECT_LT(agent.signaled, agent.requests);
  client.reset();
  listener.reset();
}

// Echoes each message and counts the echoes that were on the device before onRecv returned.
struct CountingEcho : evrdma::ConnectionHandler {
  int* postedInside = nullptr;
  int* echoes = nullptr;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    const uint64_t before = c.sendQueueStats().posts;
    if (c.postSend(data, length) != 0) return;
    ++*echoes;
    if (c.sendQueueStats().posts > before) ++*postedInside;
  }
};

struct CountingEchoFactory : evrdma::AgentFactory {
  int postedInside = 0, echoes = 0;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    auto echo = std::make_unique<CountingEcho>();
    echo->postedInside = &postedInside;
    echo->echoes = &echoes;
    return evrdma::AcceptDecision::accept(std::move(echo), evrdma::ConnectionOptions{});
  }
};

TEST(PollBatching, TheAnswerToAPollsOnlyMessageIsPostedFromInsideItsCallbackButNotBeforeItsReceiveOnUnframedIwarp) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor reactor;
  ASSERT_TRUE(reactor.valid());
  CountingEchoFactory factory;
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  auto owned = std::make_unique<evrdma::test::Sender>();  // one message at a time: a ping-pong
  evrdma::test::Sender* sender = owned.get();
  sender->count = 200;
  sender->closeWhenDone = false;
  evrdma::Client::Ptr client = evrdma::Client::create(reactor, std::move(owned), evrdma::ClientOptions{});
  ASSERT_EQ(client->connect(bed.ip, listener->port()), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return sender->echoed == sender->count || sender->error != 0; }, 120s));
  EXPECT_EQ(sender->error, 0) << sender->op;
  EXPECT_EQ(factory.echoes, sender->count);
  std::printf("%d of %d echoes were on the device before their onRecv returned\n", factory.postedInside,
              factory.echoes);
  // A poll finds each message alone (beside the completion of the previous echo's send);
  // batched to the poll's end, no echo at all would be posted inside its callback. Not on iWARP
  // unframed: there the echo waits until the receive it answers is posted again (the client,
  // answered, could send its next message into a receive queue one short, and iWARP has no RNR
  // retry: blast-sr-2's client broke 2 runs in 20 that way).
  if (evrdma::test::onIwarp())
    EXPECT_EQ(factory.postedInside, 0);
  else
    EXPECT_GT(factory.postedInside, 0);
  client.reset();
  listener.reset();
}

}  // namespace
