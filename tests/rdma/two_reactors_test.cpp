// Two Reactors in one process on the same device (one per thread, say): each has its own CQs,
// channel and PD on the device, and they share its async event fd. A failure on one Reactor's
// connection (a message too long for the agent, read by A's loop first when the device reports it
// as an async event) reaches that connection, and the other Reactor's connection stays intact.
// Which Reactor reads an async event is the kernel's choice; the routing itself is unit-tested
// (tests/unit/async_event_router_test.cpp).
#include <event2/event.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

struct Outcome {
  bool established = false, closed = false;
  int err = 0;
  std::string error;
};

struct Recording : evrdma::ConnectionHandler {
  Outcome& out;
  size_t sendOnEstablished;
  Recording(Outcome& o, size_t send = 0) : out(o), sendOnEstablished(send) {}
  void onEstablished(evrdma::Connection& c) noexcept override {
    out.established = true;
    if (sendOnEstablished > 0) {
      std::vector<uint8_t> message(sendOnEstablished, 1);
      c.postSend(message.data(), message.size());
    }
  }
  void onError(evrdma::Connection&, int e, const char* op) noexcept override { out.err = e, out.error = op; }
  void onClosed(evrdma::Connection&) noexcept override { out.closed = true; }
};

struct OneAgentFactory : evrdma::AgentFactory {
  Outcome agent;
  evrdma::ConnectionOptions options;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::accept(std::make_unique<Recording>(agent), options);
  }
};

bool spin(evrdma::Reactor& reactor, std::chrono::milliseconds limit, const std::function<bool()>& done) {
  return evrdma::test::spinUntil({&reactor}, limit, done);
}

TEST(TwoReactors, OnOneDeviceEachHearsItsOwnFailuresAndKeepsItsConnections) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor a, b;
  ASSERT_TRUE(a.valid() && b.valid());

  // A: an idle connection of its own, so that A watches the device too.
  OneAgentFactory factoryA;
  auto listenerA = evrdma::Listener::create(a, factoryA);
  ASSERT_EQ(listenerA->listen(bed.ip, 0), 0);
  Outcome clientA;
  auto connectionA = evrdma::Client::create(a, std::make_unique<Recording>(clientA));
  ASSERT_EQ(connectionA->connect(bed.ip, listenerA->port()), 0);
  ASSERT_TRUE(spin(a, 30s, [&] { return clientA.established && factoryA.agent.established; }));

  // B: an agent that takes 64 bytes, and a client that sends it 1000.
  OneAgentFactory factoryB;
  factoryB.options.maxMessageSize = 64;
  auto listenerB = evrdma::Listener::create(b, factoryB);
  ASSERT_EQ(listenerB->listen(bed.ip, 0), 0);
  Outcome clientB;
  evrdma::ClientOptions big;
  big.maxMessageSize = 1000;
  auto connectionB = evrdma::Client::create(b, std::make_unique<Recording>(clientB), big);
  ASSERT_EQ(connectionB->connect(bed.ip, listenerB->port()), 0);
  ASSERT_TRUE(spin(b, 30s, [&] { return clientB.established && factoryB.agent.established; }));
  // Sent from outside B's loop; then A's loop runs first.
  std::vector<uint8_t> message(1000, 1);
  ASSERT_EQ(connectionB->postSend(message.data(), message.size()), 0);
  spin(a, 1000ms, [] { return false; });
  ASSERT_TRUE(spin(b, 30s, [&] { return factoryB.agent.closed; }));
  std::printf("[ figures  ] B's agent: %s\n", factoryB.agent.error.c_str());
  EXPECT_NE(factoryB.agent.error.find("maxMessageSize"), std::string::npos) << factoryB.agent.error;
  // A's own connection is untouched.
  EXPECT_EQ(connectionA->state(), evrdma::ConnectionState::Established);
  EXPECT_EQ(clientA.error, "");
  EXPECT_EQ(factoryA.agent.error, "");
  connectionA.reset();
  connectionB.reset();
  listenerA.reset();
  listenerB.reset();
  EXPECT_TRUE(spin(a, 30s, [&] { return evrdma::test::noConnectionsLeft(a); })) << "A's connections left open";
  EXPECT_TRUE(spin(b, 30s, [&] { return evrdma::test::noConnectionsLeft(b); })) << "B's connections left open";
}

}  // namespace
