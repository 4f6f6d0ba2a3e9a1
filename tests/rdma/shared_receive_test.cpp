// The shared receive queue (ConnectionOptions::sharedReceiveQueue) over real RDMA: agents receive
// through one SRQ fed from one pool, which grows when the device says it runs low; framed
// connections keep their credits (no sender ever finds the pool empty); buffers of connections
// that close amid traffic go back to the pool. Both ends in one process and one Reactor: the
// clients have receive queues of their own, the agents share one.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Client.h"
#include "evrdma/DeviceCounters.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

constexpr size_t kMessageSize = 64;

using evrdma::test::runUntil;

// What one agent saw (kept by the factory: the handler goes with its connection).
struct AgentRecord {
  uint32_t received = 0, outOfOrder = 0;
  std::string error;
  bool closed = false;
};

// Counts the messages of one connection, each carrying its sequence number.
struct CountingAgent : evrdma::ConnectionHandler {
  AgentRecord& record;
  bool closeOnFirst;
  CountingAgent(AgentRecord& r, bool close) : record(r), closeOnFirst(close) {}
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    if (closeOnFirst) c.close();  // while the rest of the peer's burst is still arriving
    uint32_t sequence = 0;
    if (length >= sizeof sequence) std::memcpy(&sequence, data, sizeof sequence);
    if (length != kMessageSize || sequence != record.received) ++record.outOfOrder;
    ++record.received;
  }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    record.error = std::string(op) + ": " + std::strerror(-err);
  }
  void onClosed(evrdma::Connection&) noexcept override { record.closed = true; }
};

struct SharedReceivesFactory : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  bool closeOnFirst = false;
  std::deque<AgentRecord> agents;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    agents.emplace_back();
    return evrdma::AcceptDecision::accept(std::make_unique<CountingAgent>(agents.back(), closeOnFirst), options);
  }
  uint64_t received() const {
    uint64_t total = 0;
    for (const AgentRecord& agent : agents) total += agent.received;
    return total;
  }
};

// Sends `total` numbered messages, as fast as its send buffers come free.
struct Sender : evrdma::ConnectionHandler {
  uint32_t total = 0, sent = 0;
  bool established = false, closed = false;
  std::string error;
  void pump(evrdma::Connection& c) {
    uint8_t message[kMessageSize] = {};
    while (sent < total) {
      std::memcpy(message, &sent, sizeof sent);
      if (c.postSend(message, sizeof message) != 0) break;  // -ENOBUFS: onSendDone brings room
      ++sent;
    }
  }
  void onEstablished(evrdma::Connection&) noexcept override { established = true; }
  void onSendDone(evrdma::Connection& c, uint64_t) noexcept override { pump(c); }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    error = std::string(op) + ": " + std::strerror(-err);
  }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

class SharedReceives : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(evrdma::test::loadTestBed(bed_)); }

  // Listens with agents that receive through the shared queue, and connects `count` senders.
  void connect(size_t count, const evrdma::ConnectionOptions& agentOptions, evrdma::ClientOptions clientOptions,
               uint32_t messagesEach) {
    factory_.options = agentOptions;
    factory_.options.sharedReceiveQueue = true;
    listener_ = evrdma::Listener::create(reactor_, factory_);
    ASSERT_EQ(listener_->listen(bed_.ip, 0), 0);
    for (size_t i = 0; i < count; ++i) {
      auto sender = std::make_unique<Sender>();
      sender->total = messagesEach;
      senders_.push_back(sender.get());
      clients_.push_back(evrdma::Client::create(reactor_, std::move(sender), clientOptions));
      ASSERT_EQ(clients_.back()->connect(bed_.ip, listener_->port()), 0);
    }
    ASSERT_TRUE(runUntil(reactor_, [&] {
      for (const Sender* sender : senders_)
        if (!sender->established && sender->error.empty()) return false;
      return factory_.agents.size() == count;
    }, 60s));
    for (const Sender* sender : senders_) ASSERT_TRUE(sender->established) << sender->error;
  }
  // Every sender posts what its send buffers hold, all in one turn of the loop.
  void burst() {
    for (size_t i = 0; i < clients_.size(); ++i) senders_[i]->pump(*clients_[i]);
  }
  bool iwarp() const { return !clients_.empty() && !clients_.front()->supportsImmediateData(); }
  // Every agent got `each` messages, in order, and no side saw an error.
  void expectEveryMessageInOrder(uint32_t each) {
    for (size_t i = 0; i < senders_.size(); ++i) {
      EXPECT_EQ(factory_.agents[i].received, each) << "agent " << i;
      EXPECT_EQ(factory_.agents[i].outOfOrder, 0u) << "agent " << i;
      EXPECT_EQ(factory_.agents[i].error, "") << "agent " << i;
      EXPECT_EQ(senders_[i]->error, "") << "client " << i;
    }
  }
  // Unframed agents of 8 receives, and senders of 8 send buffers (a burst of 8 each).
  static evrdma::ConnectionOptions burstAgentOptions() {
    evrdma::ConnectionOptions options;
    options.maxMessageSize = kMessageSize;
    options.recvDepth = 8;
    return options;
  }
  static evrdma::ClientOptions burstSenderOptions() {
    evrdma::ClientOptions options;
    options.maxMessageSize = kMessageSize;
    options.sendDepth = 8;
    options.recvDepth = 1;
    return options;
  }

  evrdma::test::TestBed bed_;
  evrdma::Reactor reactor_;
  SharedReceivesFactory factory_;
  evrdma::Listener::Ptr listener_;
  std::vector<Sender*> senders_;
  std::vector<evrdma::Client::Ptr> clients_;
};

void print(const char* what, const evrdma::SharedReceiveStats& s) {
  std::printf("%s: %u queue(s), %llu connections, %llu buffers, %llu posted, %llu guaranteed, %llu low-watermark "
              "events, grew %llu times (%llu refused)\n",
              what, s.queues, static_cast<unsigned long long>(s.connections), static_cast<unsigned long long>(s.buffers),
              static_cast<unsigned long long>(s.posted), static_cast<unsigned long long>(s.reserved),
              static_cast<unsigned long long>(s.lowWatermarkEvents), static_cast<unsigned long long>(s.growths),
              static_cast<unsigned long long>(s.growthRefusals));
}

// 24 peers send 8 messages each at once: 192 messages for a pool that starts with 32 buffers.
// On RoCE an unframed agent is guaranteed nothing: the device runs low, says so, and the pool
// grows (by 64 KiB of buffers at least) while the senders retry (RNR). On iWARP each agent is
// guaranteed its recvDepth.
TEST_F(SharedReceives, ABurstFromManyPeersIsReceivedWhileThePoolGrowsWhenTheDeviceSaysItRunsLow) {
  const evrdma::ConnectionOptions agentOptions = burstAgentOptions();
  constexpr size_t kPeers = 24;
  constexpr uint32_t kEach = 8;
  connect(kPeers, agentOptions, burstSenderOptions(), kEach);
  const evrdma::SharedReceiveStats before = reactor_.sharedReceiveStats();
  print("connected", before);
  EXPECT_EQ(before.queues, 1u);
  EXPECT_EQ(before.connections, kPeers);
  EXPECT_EQ(before.reserved, iwarp() ? kPeers * agentOptions.recvDepth : 0u);
  EXPECT_GE(before.buffers, before.reserved);
  EXPECT_EQ(before.posted, before.buffers);

  burst();
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.received() == kPeers * kEach; }, 60s))
      << factory_.received() << " of " << kPeers * kEach << " messages";
  const evrdma::SharedReceiveStats after = reactor_.sharedReceiveStats();
  print("after the burst", after);
  expectEveryMessageInOrder(kEach);
  EXPECT_EQ(after.posted, after.buffers) << "every buffer back on the device";
  if (!iwarp()) {
    EXPECT_GE(after.lowWatermarkEvents, 1u);
    EXPECT_GT(after.buffers, before.buffers) << "the pool did not grow";
    // Small buffers grow 64 KiB at a time (1 024 of 64 bytes), not by half of 32.
    EXPECT_GE(after.buffers - before.buffers, 1024u) << "grew by too little for a burst from many senders";
  }
}

// Every agent takes a seat of its recvDepth on a shared queue, guaranteed buffers or not, and a
// queue seats no more than its capacity (4 096 on RoCE, 512 on iWARP): when all its agents send at
// once, the grown pool has room for what their rings would have held. Three agents whose depths
// add up past it take two queues, and a burst from all three arrives whole. (On RoCE, before
// seats, unframed agents were guaranteed nothing and all joined one queue: 50 000 ping-sr agents
// on one SRQ of 4 096 buffers, whose senders' RNR retries starved the server.)
TEST_F(SharedReceives, AgentsTakeSeatsOfTheirReceiveDepthSoAQueueSeatsNoMoreThanItsCapacity) {
  evrdma::ConnectionOptions agentOptions = burstAgentOptions();
  agentOptions.recvDepth = evrdma::test::onIwarp() ? 200 : 1500;  // three of them: past 512 or 4 096
  constexpr size_t kPeers = 3;
  constexpr uint32_t kEach = 8;
  connect(kPeers, agentOptions, burstSenderOptions(), kEach);
  const evrdma::SharedReceiveStats connected = reactor_.sharedReceiveStats();
  print("connected", connected);
  EXPECT_EQ(connected.queues, 2u) << "three agents of " << agentOptions.recvDepth << " receives on one queue";
  EXPECT_EQ(connected.connections, kPeers);

  burst();
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.received() == kPeers * kEach; }, 60s))
      << factory_.received() << " of " << kPeers * kEach << " messages";
  expectEveryMessageInOrder(kEach);
}

// Framed connections over the shared queue: each agent is guaranteed its recvDepth buffers, the
// credits its peer holds, so however fast 12 peers send, none ever finds the pool empty: on RoCE
// no receiver-not-ready NAK is sent, on iWARP (no RNR at all) no connection breaks.
TEST_F(SharedReceives, FramedConnectionsKeepTheirCreditsSoNoSenderFindsThePoolEmpty) {
  evrdma::ConnectionOptions agentOptions;
  agentOptions.framed = true;
  agentOptions.maxMessageSize = kMessageSize;
  agentOptions.recvDepth = 16;  // 12 x 16 credits: far more than the pool's first 32 buffers
  evrdma::ClientOptions clientOptions;
  clientOptions.framed = true;
  clientOptions.maxMessageSize = kMessageSize;
  clientOptions.sendDepth = 32;
  clientOptions.recvDepth = 5;
  constexpr size_t kPeers = 12;
  constexpr uint32_t kEach = 300;
  connect(kPeers, agentOptions, clientOptions, kEach);
  const evrdma::SharedReceiveStats connected = reactor_.sharedReceiveStats();
  print("connected", connected);
  EXPECT_EQ(connected.reserved, kPeers * agentOptions.recvDepth);
  EXPECT_GE(connected.buffers, connected.reserved);
  const evrdma::RnrCounters rnrBefore = evrdma::readRnrCounters(clients_.front()->device());

  burst();
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.received() == kPeers * kEach; }, 120s))
      << factory_.received() << " of " << kPeers * kEach << " messages";
  const evrdma::RnrCounters rnrAfter = evrdma::readRnrCounters(clients_.front()->device());
  print("after the traffic", reactor_.sharedReceiveStats());
  expectEveryMessageInOrder(kEach);
  uint64_t creditWaits = 0;
  for (const evrdma::Client::Ptr& client : clients_) creditWaits += client->stats().creditWaits;
  std::printf("credit waits at the senders: %llu\n", static_cast<unsigned long long>(creditWaits));
  EXPECT_GT(creditWaits, 0u) << "the senders never had to wait: the test did not press on the credits";
  if (rnrBefore.available) {
    std::printf("RNR NAKs sent during the traffic: %llu\n",
                static_cast<unsigned long long>(rnrAfter.naksSent - rnrBefore.naksSent));
    EXPECT_EQ(rnrAfter.naksSent, rnrBefore.naksSent) << "a sender found the shared pool empty";
  }
}

// 16 peers send 8 messages each, and each agent closes on the first: the rest of the burst lands
// while it tears down (the connection gives those buffers straight back) or after its QP is gone
// (the dispatcher does). Every buffer is back in the pool once they are all closed, and the
// pool's guarantees are too.
TEST_F(SharedReceives, BuffersOfConnectionsThatCloseAmidTrafficGoBackToThePool) {
  const evrdma::ConnectionOptions agentOptions = burstAgentOptions();
  constexpr size_t kPeers = 16;
  factory_.closeOnFirst = true;
  connect(kPeers, agentOptions, burstSenderOptions(), 8);
  burst();
  ASSERT_TRUE(runUntil(reactor_, [&] {
    for (const AgentRecord& agent : factory_.agents)
      if (!agent.closed) return false;
    for (const Sender* sender : senders_)
      if (!sender->closed) return false;
    return true;
  }, 60s));
  // Until the completions of QPs already gone have brought their buffers back (or the deadline).
  runUntil(reactor_, [&] {
    const evrdma::SharedReceiveStats now = reactor_.sharedReceiveStats();
    return now.connections == 0 && now.reserved == 0 && now.posted == now.buffers;
  }, 30s);
  const evrdma::SharedReceiveStats after = reactor_.sharedReceiveStats();
  print("all closed", after);
  std::printf("messages handed to the agents: %llu of %zu\n", static_cast<unsigned long long>(factory_.received()),
              kPeers * 8);
  EXPECT_EQ(after.connections, 0u);
  EXPECT_EQ(after.reserved, 0u);
  EXPECT_EQ(after.posted, after.buffers) << "buffers were lost with their connections";
}

// Its buffers belong to every connection on the queue: an application cannot hold them back.
TEST_F(SharedReceives, WithoutAutoPostRecvTheOptionIsRefusedAtOnce) {
  evrdma::ClientOptions options;
  options.sharedReceiveQueue = true;
  options.autoPostRecv = false;
  const char* problem = "";
  EXPECT_EQ(evrdma::checkOptions(options, problem), -EINVAL);
  EXPECT_NE(std::string(problem).find("autoPostRecv"), std::string::npos) << problem;
  auto client = evrdma::Client::create(reactor_, std::make_unique<Sender>(), options);
  EXPECT_EQ(client->connect(bed_.ip, 1), -EINVAL);
}

}  // namespace
