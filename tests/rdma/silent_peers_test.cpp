// Peers that complete the connection to a framed listener (byte streams are framed) but never say
// hello, the first frame: each is closed once ListenerOptions::helloTimeout passes, and while
// requests wait for the memory such agents hold, the one silent longest is closed to make room.
// The silent peers are unframed evrdma clients: they connect and then send nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "rdma/EchoPair.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;
using evrdma::test::runUntil;

class SilentPeers : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed));
    factory.options.framed = true;
    factory.options.maxMessageSize = 256;
  }
  void TearDown() override {
    clients.clear();
    listener.reset();
  }
  // A client that connects and never says hello (an unframed client: framing starts with a hello).
  evrdma::test::Sender* connectSilent() {
    auto owned = std::make_unique<evrdma::test::Sender>();
    evrdma::test::Sender* peer = owned.get();
    peer->closeWhenDone = false;  // it sends nothing, and stays
    evrdma::ClientOptions options = evrdma::test::framedClient();
    options.framed = false;
    clients.push_back(evrdma::Client::create(reactor, std::move(owned), options));
    EXPECT_EQ(clients.back()->connect(bed.ip, listener->port()), 0);
    return peer;
  }
  evrdma::test::Sender* connectGood(int roundTrips) {
    auto owned = std::make_unique<evrdma::test::Sender>();
    evrdma::test::Sender* peer = owned.get();
    peer->count = roundTrips;
    evrdma::ClientOptions options = evrdma::test::framedClient();
    options.connectTimeout = 2min;  // bounds a hang only: it may wait for memory
    clients.push_back(evrdma::Client::create(reactor, std::move(owned), options));
    EXPECT_EQ(clients.back()->connect(bed.ip, listener->port()), 0);
    return peer;
  }

  evrdma::test::TestBed bed;
  evrdma::Reactor reactor;
  evrdma::test::EchoFactory factory;
  evrdma::Listener::Ptr listener;
  std::vector<evrdma::Client::Ptr> clients;
};

// A framed agent is established once the hello came, so acceptTimeout bounds a silent peer too:
// here ten minutes, so that only the hello timer can close it before the test's deadline.
TEST_F(SilentPeers, AnAgentWhosePeerSaysNoHelloWithinHelloTimeoutIsClosedCountedAndOthersAreServed) {
  evrdma::ListenerOptions options;
  options.acceptTimeout = 10min;
  options.helloTimeout = 300ms;
  listener = evrdma::Listener::create(reactor, factory, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  evrdma::test::Sender* silent = connectSilent();
  evrdma::test::Sender* good = connectGood(50);
  ASSERT_TRUE(runUntil(reactor, [&] { return silent->closed && good->closed; }, 60s))
      << "silent closed " << silent->closed << ", good client " << good->echoed << " of 50 echoes";
  const evrdma::ListenerStats& stats = listener->stats();
  EXPECT_EQ(good->echoed, 50);
  EXPECT_EQ(good->error, 0) << good->op;
  EXPECT_TRUE(silent->established) << "the silent peer never completed its connection: the test proved nothing";
  EXPECT_EQ(stats.silentClosed, 1u);
  EXPECT_EQ(stats.silentEvicted, 0u);
  EXPECT_EQ(stats.agentsTimedOut, 1u);
  EXPECT_NE(factory.lastAgentOp.find("no hello within helloTimeout"), std::string::npos) << factory.lastAgentOp;
}

// Agents not yet established may pin maxUnestablishedMemory, room here for two (a quarter of the
// bound is kept for requests smaller than an eighth of it, which these are not): two silent peers
// fill it, and with hello and accept timeouts of ten minutes a good client would wait that long. Once the
// first has been silent kEvictSilentAfter, it is closed to make room and the good client is served.
TEST_F(SilentPeers, WhileARequestWaitsForMemoryTheAgentSilentLongestIsClosedToMakeRoom) {
  // How much one agent pins until it is established, read from a first listener.
  listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  evrdma::test::Sender* probe = connectSilent();
  ASSERT_TRUE(runUntil(reactor, [&] { return probe->established; }, 60s));
  const uint64_t perAgent = listener->unestablishedMemory();
  ASSERT_GT(perAgent, 0u);
  clients.clear();
  listener.reset();

  evrdma::ListenerOptions options;
  options.acceptTimeout = options.helloTimeout = 10min;
  options.maxUnestablishedMemory = 3 * perAgent;
  listener = evrdma::Listener::create(reactor, factory, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  evrdma::test::Sender* first = connectSilent();
  evrdma::test::Sender* second = connectSilent();
  ASSERT_TRUE(runUntil(reactor, [&] { return first->established && second->established; }, 60s));
  evrdma::test::Sender* good = connectGood(20);
  ASSERT_TRUE(runUntil(reactor, [&] { return good->closed; }, 60s))
      << "the good client waited behind the silent peers: " << good->echoed << " of 20 echoes";
  const evrdma::ListenerStats& stats = listener->stats();
  std::printf("[ figures  ] %llu bytes per unestablished agent, room for 2: %llu held for memory, %llu silent "
              "evicted\n",
              static_cast<unsigned long long>(perAgent), static_cast<unsigned long long>(stats.heldForMemory),
              static_cast<unsigned long long>(stats.silentEvicted));
  EXPECT_EQ(good->echoed, 20);
  EXPECT_EQ(good->error, 0) << good->op;
  EXPECT_GT(stats.heldForMemory, 0u) << "the good client never waited for memory: the test proved nothing";
  EXPECT_GE(stats.silentEvicted, 1u);
  EXPECT_EQ(stats.silentClosed, 0u) << "the hello timeout is ten minutes";
  EXPECT_TRUE(first->closed) << "the peer silent longest goes first";
  EXPECT_FALSE(second->closed) << "one eviction made room for the one request";
}

}  // namespace
