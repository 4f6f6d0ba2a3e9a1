// How a Reactor reads its CM channel when many events wait there at once: a server whose clients
// all disconnect while its loop is busy elsewhere. The kernel walks every unread event of a channel
// each time an id of it is destroyed, so a server that read only the events it dispatched in a
// turn (16) paid that walk on each of thousands of teardowns (drains of 50 000 agents began at
// 50-100 a second). It reads every waiting event in the turn, dispatching 16 of them. What it read
// ahead goes with its id: a listener dropped while requests wait in the queue never hears them,
// and their clients are refused, as the kernel refuses requests nobody read.
#include <event2/event.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CmDispatcher.h"  // kBudget
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

evrdma::ConnectionOptions smallOptions() {
  evrdma::ConnectionOptions options;
  options.maxMessageSize = 64;
  options.recvDepth = 2;
  options.sendDepth = 2;
  return options;
}

struct Counts {
  size_t established = 0, disconnected = 0, closed = 0, failed = 0;
  uint64_t dispatchedBefore = 0;  // the server's CM events dispatched before the disconnects
  uint64_t readAtFirstTeardown = 0;  // and read since then (dispatched or waiting) when its first agent heard
};

struct Counting : evrdma::ConnectionHandler {
  Counts& counts;
  evrdma::Reactor* server;  // set on agents: whose CM events to look at
  Counting(Counts& c, evrdma::Reactor* s = nullptr) : counts(c), server(s) {}
  void onEstablished(evrdma::Connection&) noexcept override { ++counts.established; }
  void onDisconnected(evrdma::Connection&) noexcept override {
    if (counts.disconnected++ > 0 || server == nullptr) return;
    const evrdma::CmEventStats cm = server->cmEventStats();
    counts.readAtFirstTeardown = cm.waiting + cm.dispatched - counts.dispatchedBefore;
  }
  void onError(evrdma::Connection&, int, const char*) noexcept override { ++counts.failed; }
  void onClosed(evrdma::Connection&) noexcept override { ++counts.closed; }
};

struct CountingFactory : evrdma::AgentFactory {
  Counts counts;
  evrdma::Reactor& server;
  explicit CountingFactory(evrdma::Reactor& s) : server(s) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::accept(std::make_unique<Counting>(counts, &server), smallOptions());
  }
};

// Hears one connect request and refuses it: the mark that what was sent before it has arrived.
struct Sentinel : evrdma::AgentFactory {
  bool heard = false;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    heard = true;
    return evrdma::AcceptDecision::reject("sentinel");
  }
};

using evrdma::test::spinUntil;

// Connects to a sentinel listener on `clients`, after what they sent: once it hears the request,
// what was sent before it has reached the server's channel too (one device, one CM, in order).
::testing::AssertionResult sentinelHearsWhatWasSentBefore(evrdma::Reactor& clients, const std::string& ip) {
  Sentinel sentinel;
  auto listener = evrdma::Listener::create(clients, sentinel);
  if (listener->listen(ip, 0) != 0) return ::testing::AssertionFailure() << "the sentinel could not listen";
  auto mark = evrdma::Client::create(clients, std::make_unique<evrdma::ConnectionHandler>());
  if (mark->connect(ip, listener->port()) != 0) return ::testing::AssertionFailure() << "the sentinel's client";
  if (!spinUntil({&clients}, 60s, [&] { return sentinel.heard; }))
    return ::testing::AssertionFailure() << "the sentinel never heard its client";
  return ::testing::AssertionSuccess();
}

TEST(CmEvents, AServerReadsEveryDisconnectWaitingInItsChannelBeforeItsFirstTeardown) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  // Two Reactors on this thread: the server's loop runs only when this test turns it.
  evrdma::Reactor server, clients;
  ASSERT_TRUE(server.valid() && clients.valid());
  // Both ends in this process: siw takes about 70 queue pairs per process (30 connections here).
  const size_t kClients = evrdma::test::onIwarp() ? 30 : evrdma::test::lightStress() ? 64 : 200;

  CountingFactory factory(server);
  auto listener = evrdma::Listener::create(server, factory);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  Counts clientCounts;
  std::vector<evrdma::Client::Ptr> all;
  for (size_t i = 0; i < kClients; ++i) {
    evrdma::ClientOptions options;
    static_cast<evrdma::ConnectionOptions&>(options) = smallOptions();
    all.push_back(evrdma::Client::create(clients, std::make_unique<Counting>(clientCounts), options));
    ASSERT_EQ(all.back()->connect(bed.ip, listener->port()), 0);
  }
  ASSERT_TRUE(spinUntil({&server, &clients}, 120s, [&] {
    return clientCounts.established == kClients && factory.counts.established == kClients;
  })) << clientCounts.established << " clients and " << factory.counts.established << " agents of " << kClients
      << " established (" << clientCounts.failed << " clients failed, " << clientCounts.closed << " closed)";

  // The server's loop stands still: every client disconnects, then connects to a sentinel behind
  // the disconnects. When the sentinel hears it, the disconnects are in the server's channel.
  factory.counts.dispatchedBefore = server.cmEventStats().dispatched;
  for (const evrdma::Client::Ptr& client : all) client->close();
  ASSERT_TRUE(sentinelHearsWhatWasSentBefore(clients, bed.ip));
  EXPECT_EQ(factory.counts.disconnected, 0u);

  ASSERT_TRUE(spinUntil({&server, &clients}, 120s, [&] {
    return factory.counts.closed == kClients && clientCounts.closed == kClients;
  })) << factory.counts.closed << " agents and " << clientCounts.closed << " clients of " << kClients << " closed";
  const evrdma::CmEventStats cm = server.cmEventStats();
  std::printf("[ figures  ] %zu clients disconnected while the server's loop stood still: when its first agent "
              "heard, the server had read %llu CM events (the most waiting at once: %llu; %llu turns left some for "
              "later)\n",
              kClients, static_cast<unsigned long long>(factory.counts.readAtFirstTeardown),
              static_cast<unsigned long long>(cm.mostWaiting), static_cast<unsigned long long>(cm.budgetYields));
  // Every disconnect was read in one turn (they waited together), though a turn dispatches only
  // kBudget of them; so all were read by the time the first agent heard.
  EXPECT_GT(kClients, static_cast<size_t>(evrdma::CmDispatcher::kBudget));
  EXPECT_EQ(cm.mostWaiting, kClients);
  EXPECT_EQ(factory.counts.readAtFirstTeardown, kClients);
  EXPECT_EQ(factory.counts.failed, 0u);
  EXPECT_EQ(clientCounts.failed, 0u);
}

struct RequestCounting : evrdma::AgentFactory {
  Counts agents;
  size_t requests = 0;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    ++requests;
    return evrdma::AcceptDecision::accept(std::make_unique<Counting>(agents), smallOptions());
  }
};

struct Refused : Counting {
  size_t& refused;
  Refused(Counts& c, size_t& r) : Counting(c), refused(r) {}
  void onRejected(evrdma::Connection&, const evrdma::RejectInfo&) noexcept override { ++refused; }
};

TEST(CmEvents, AListenerDroppedWhileRequestsWaitInTheQueueNeverHearsThemAndTheirClientsAreRefused) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor server, clients;
  ASSERT_TRUE(server.valid() && clients.valid());
  constexpr size_t kClients = 40;
  clients.setMaxConnectsInFlight(0);  // every request on the wire at once

  RequestCounting factory;
  evrdma::ListenerOptions listening;
  listening.acceptsPerTurn = 0;  // the factory hears every request the dispatcher hands out
  auto listener = evrdma::Listener::create(server, factory, listening);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  Counts clientCounts;
  size_t refused = 0;
  std::vector<evrdma::Client::Ptr> all;
  for (size_t i = 0; i < kClients; ++i) {
    evrdma::ClientOptions options;
    static_cast<evrdma::ConnectionOptions&>(options) = smallOptions();
    all.push_back(evrdma::Client::create(clients, std::make_unique<Refused>(clientCounts, refused), options));
    ASSERT_EQ(all.back()->connect(bed.ip, listener->port()), 0);
  }
  // The server's loop stands still until every request is in its channel: all on the wire, then a
  // sentinel's request behind them heard.
  ASSERT_TRUE(spinUntil({&clients}, 60s, [&] {
    for (const evrdma::Client::Ptr& client : all)
      if (client->state() != evrdma::ConnectionState::Connecting) return false;
    return true;
  })) << "not every client sent its request";
  ASSERT_TRUE(sentinelHearsWhatWasSentBefore(clients, bed.ip));

  // One turn of the server: it reads every request and hands the listener a budget of them.
  event_base_loop(server.base(), EVLOOP_ONCE | EVLOOP_NONBLOCK);
  const size_t heard = factory.requests;
  const uint64_t waiting = server.cmEventStats().waiting;
  EXPECT_EQ(heard, static_cast<size_t>(evrdma::CmDispatcher::kBudget));
  EXPECT_EQ(heard + waiting, kClients);
  listener.reset();  // its agents close; the requests it never heard go with it

  ASSERT_TRUE(spinUntil({&server, &clients}, 120s, [&] {
    return clientCounts.closed == kClients && factory.agents.closed == factory.requests &&
           server.cmEventStats().waiting == 0;
  })) << clientCounts.closed << " clients of " << kClients << " closed (" << refused << " refused, "
         << clientCounts.failed << " failed); agents " << factory.agents.established << " established, "
         << factory.agents.closed << " closed; " << server.cmEventStats().waiting << " CM events waiting";
  std::printf("[ figures  ] %zu connect requests in one turn: %zu heard by the listener, %llu waiting when it was "
              "dropped; %zu clients refused, %zu ended by the listener's end\n",
              kClients, heard, static_cast<unsigned long long>(waiting), refused, clientCounts.failed);
  EXPECT_EQ(factory.requests, heard);  // none of those waiting reached the factory of a listener gone
  EXPECT_GE(refused, waiting);         // each of their clients heard a refusal, not a timeout
  EXPECT_GE(server.cmEventStats().withoutHandler, waiting);
}

}  // namespace
