// Two Reactors in one process on the same device: the device's async events come from one fd that
// both watch, so either may read an event about the other's QP. It must reach the Reactor that
// owns the QP. On iWARP a message too long for the receiver makes the receiver's QP fatal (an
// async event); here Reactor A reads the device's events first while Reactor B owns that QP. (On
// RoCE the same failure arrives as a failed receive on B's own CQ; the test holds on both.)
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
  size_t maxMessageSize;
  explicit OneAgentFactory(size_t size) : maxMessageSize(size) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    evrdma::ConnectionOptions options;
    options.maxMessageSize = maxMessageSize;
    return evrdma::AcceptDecision::accept(std::make_unique<Recording>(agent), options);
  }
};

// Runs one reactor's loop (without blocking) until `done()` or `limit`.
bool spin(evrdma::Reactor& reactor, std::chrono::milliseconds limit, const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    event_base_loop(reactor.base(), EVLOOP_NONBLOCK);
    if (done()) return true;
  }
  return done();
}

TEST(TwoReactors, AnAsyncEventReadByOneReactorReachesTheReactorThatOwnsTheQp) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor a, b;
  ASSERT_TRUE(a.valid() && b.valid());

  // A: an idle connection of its own, so that A watches the device too.
  OneAgentFactory factoryA(64);
  auto listenerA = evrdma::Listener::create(a, factoryA);
  ASSERT_EQ(listenerA->listen(bed.ip, 0), 0);
  Outcome clientA;
  auto connectionA = evrdma::Client::create(a, std::make_unique<Recording>(clientA));
  ASSERT_EQ(connectionA->connect(bed.ip, listenerA->port()), 0);
  ASSERT_TRUE(spin(a, 30s, [&] { return clientA.established && factoryA.agent.established; }));

  // B: an agent that takes 64 bytes, and a client that sends it 1000 once established.
  OneAgentFactory factoryB(64);
  auto listenerB = evrdma::Listener::create(b, factoryB);
  ASSERT_EQ(listenerB->listen(bed.ip, 0), 0);
  Outcome clientB;
  evrdma::ClientOptions big;
  big.maxMessageSize = 1000;
  auto connectionB = evrdma::Client::create(b, std::make_unique<Recording>(clientB, 1000), big);
  ASSERT_EQ(connectionB->connect(bed.ip, listenerB->port()), 0);
  ASSERT_TRUE(spin(b, 30s, [&] { return clientB.established && factoryB.agent.established; }));
  // The message is on its way; A gets the first look at the device's events.
  spin(a, 500ms, [] { return false; });
  ASSERT_TRUE(spin(b, 30s, [&] { return factoryB.agent.closed; }));
  std::printf("[ figures  ] B's agent: %s\n", factoryB.agent.error.c_str());
  EXPECT_NE(factoryB.agent.error.find("maxMessageSize"), std::string::npos)
      << "B's agent never heard why its QP failed: '" << factoryB.agent.error << "'";
  // A's own connection is untouched.
  EXPECT_EQ(connectionA->state(), evrdma::ConnectionState::Established);
  EXPECT_EQ(clientA.error, "");
  EXPECT_EQ(factoryA.agent.error, "");
  connectionA.reset();
  connectionB.reset();
  listenerA.reset();
  listenerB.reset();
  spin(a, 300ms, [] { return false; });
  spin(b, 300ms, [] { return false; });
}

}  // namespace
