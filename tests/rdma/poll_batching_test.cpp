// Poll batching over real RDMA: what the callbacks of one poll's completions send goes to the
// device as one post (one ibv_post_send, one doorbell system call on soft-RoCE, one signaled
// request), at the end of that poll, and still arrives whole and in order. (What it gains in
// message rate is measured by make bench, not here.)
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

}  // namespace
