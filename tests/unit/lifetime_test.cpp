// Lifetimes on the host, where no RDMA is needed: setup calls that fail produce no callback, and
// objects that outlive their Reactor are closed shells that are safe to use and to drop. Run
// under AddressSanitizer too (tools/run-tests).
#include <event2/event.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <memory>

#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

struct Counting : evrdma::ConnectionHandler {
  int* calls;
  explicit Counting(int* c) : calls(c) {}
  void onError(evrdma::Connection&, int, const char*) noexcept override { ++*calls; }
  void onClosed(evrdma::Connection&) noexcept override { ++*calls; }
};

struct NoAgents : evrdma::AgentFactory {
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::reject("no");
  }
};

TEST(Lifetime, AClientWhoseConnectFailedNeverCallsBackEvenWhenDropped) {
  evrdma::Reactor reactor;
  int calls = 0;
  auto client = evrdma::Client::create(reactor, std::make_unique<Counting>(&calls));
  EXPECT_EQ(client->connect("not-an-address", 1), -EINVAL);
  client.reset();
  evrdma::Timer stop(reactor, [&] { reactor.stop(); });
  stop.startOnce(std::chrono::milliseconds(20));
  reactor.run();
  EXPECT_EQ(calls, 0);
}

TEST(Lifetime, AClientAndListenerThatOutliveTheirReactorAreClosedShells) {
  auto reactor = std::make_unique<evrdma::Reactor>();
  int calls = 0;
  NoAgents factory;
  auto client = evrdma::Client::create(*reactor, std::make_unique<Counting>(&calls));
  auto listener = evrdma::Listener::create(*reactor, factory);
  EXPECT_EQ(listener->listen("not-an-address", 0), -EINVAL);  // an early return after a failed listen()
  reactor.reset();
  EXPECT_EQ(client->connect("127.0.0.1", 1), -ESHUTDOWN);
  EXPECT_EQ(client->postSend("x", 1), -ENOTCONN);
  client->close();
  EXPECT_EQ(listener->listen("127.0.0.1", 0), -ESHUTDOWN);
  listener->close();
  client.reset();
  listener.reset();
  EXPECT_EQ(calls, 0);
}

TEST(Lifetime, ADroppedListenerIsFreedEvenIfTheReactorGoesBeforeItsDeferredDelete) {
  auto reactor = std::make_unique<evrdma::Reactor>();
  NoAgents factory;
  auto listener = evrdma::Listener::create(*reactor, factory);
  listener.reset();  // its delete is deferred onto the Reactor...
  reactor.reset();   // ...which goes first: LeakSanitizer would report the Listener
}

TEST(Lifetime, WatchesOutlivingTheirReactorOnABaseThatRunsOnNeverFire) {
  event_base* base = event_base_new();
  auto reactor = std::make_unique<evrdma::Reactor>(base);
  int fired = 0;
  auto signal = std::make_unique<evrdma::SignalWatch>(*reactor, SIGUSR1, [&](int) { ++fired; });
  auto timer = std::make_unique<evrdma::Timer>(*reactor, [&] { ++fired; });
  timer->startPeriodic(std::chrono::milliseconds(1));
  reactor->defer([&] { ++fired; });
  reactor.reset();
  event_base_loop(base, EVLOOP_NONBLOCK);
  timeval tenMs{0, 10000};
  event_base_loopexit(base, &tenMs);
  event_base_dispatch(base);
  EXPECT_EQ(fired, 0);
  signal.reset();
  timer.reset();
  event_base_free(base);
}

}  // namespace
