// evrdma inside an application's own loop, as a user lives: an evhttp server answering GET /stats,
// an HTTP client asking it, a periodic timer and a SIGINT watch share one event_base with an
// evrdma echo server and four clients that keep the completion queue full. Everything of the
// application's must be served *while* the flood runs: the order of events is asserted, not time.
#include <event2/event.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "HostApp.h"
#include "PingPong.h"
#include "evrdma/Client.h"
#include "CompletionDispatcher.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

// If the loop ever starves, nothing inside it can end the test: the alarm does, loudly.
void starvedLoop(int) {
  const char message[] = "embedded_app_test: no end within 120 s: the loop starved (or the test hung)\n";
  ssize_t ignored = write(2, message, sizeof message - 1);
  (void)ignored;
  _exit(3);
}

TEST(EmbeddedApplication, HttpTimerAndSigintAreServedWhileRdmaCompletionsFlood) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  signal(SIGALRM, starvedLoop);
  alarm(120);

  event_base* base = event_base_new();  // the application's own loop
  ASSERT_NE(base, nullptr);
  {
    evrdma::Reactor reactor(base);
    pingsr::Limits limits;
    pingpong::EchoFactory factory(limits, pingpong::Trace::Off, 0);
    auto listener = evrdma::Listener::create(reactor, factory);
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);

    // The flood: four clients, each a round trip after the other, with no end of their own.
    constexpr int kClients = 4;
    constexpr uint64_t kEndless = 1000000000;  // the server's limit: no end in sight
    std::vector<evrdma::Client::Ptr> clients;
    std::vector<pingpong::PingClient*> pingers;
    for (int i = 0; i < kClients; ++i) {
      pingsr::ConnectInfo info{kEndless, 64};
      auto handler = std::make_unique<pingpong::PingClient>(i, info, false, pingpong::Trace::Off, nullptr);
      pingers.push_back(handler.get());
      evrdma::ClientOptions options;
      options.maxMessageSize = 64;
      options.recvDepth = 2;
      options.sendDepth = 2;
      clients.push_back(evrdma::Client::create(reactor, std::move(handler), options));
      ASSERT_EQ(clients.back()->connect(bed.ip, listener->port(), pingsr::encode(info)), 0);
    }
    auto roundTrips = [&] {
      uint64_t sum = 0;
      for (auto* p : pingers) sum += p->result().roundTrips;
      return sum;
    };

    // The application's own events.
    hostapp::StatsServer http(base, [&] { return std::to_string(roundTrips()); });
    ASSERT_EQ(http.start(), 0);
    hostapp::StatsProbe probe(reactor, http.port(), 20ms);
    std::vector<uint64_t> atResponse;
    probe.onResponse = [&](const std::string&) { atResponse.push_back(roundTrips()); };
    hostapp::TickProbe ticks(reactor, 10ms);
    std::vector<uint64_t> atTick;
    constexpr size_t kTicks = 40;
    ticks.onTick = [&](size_t n) {
      atTick.push_back(roundTrips());
      if (n == kTicks) raise(SIGINT);  // the user presses ^C in the middle of the flood
    };
    uint64_t atSigint = 0, budgetYields = 0;
    std::vector<uint64_t> perClientAtSigint;
    bool sigintSeen = false;
    evrdma::SignalWatch interrupt(reactor, SIGINT, [&](int) {
      sigintSeen = true;
      atSigint = roundTrips();
      for (auto* p : pingers) perClientAtSigint.push_back(p->result().roundTrips);
      if (const evrdma::CompletionStats* cq = clients.front()->completionStats()) budgetYields = cq->budgetYields;
      ticks.stop();
      probe.stop();
      clients.clear();  // every client closes; the listener closes its agents when dropped
      listener.reset();
    });
    ASSERT_TRUE(interrupt.valid());

    // The probes start once the flood is under way.
    evrdma::Timer startProbes(reactor, [&] {
      for (auto* p : pingers)
        if (!p->result().error.empty()) {
          ADD_FAILURE() << "a flood client ended: " << p->result().error;
          event_base_loopbreak(base);
        }
      if (roundTrips() < 1000) return;
      startProbes.cancel();
      ticks.start();
      probe.start();
    });
    startProbes.startPeriodic(5ms);
    evrdma::Timer finished(reactor, [&] {
      if (sigintSeen && factory.activeAgents == 0) event_base_loopbreak(base);
    });
    finished.startPeriodic(5ms);
    event_base_dispatch(base);

    alarm(0);
    ASSERT_TRUE(sigintSeen) << "stopped before SIGINT";
    const uint64_t atStart = atTick.empty() ? 0 : atTick.front();
    std::printf("[ figures  ] %s: %zu ticks, %zu HTTP responses, %llu round trips before SIGINT "
                "(%llu when the first tick came), %llu completion budget yields\n",
                bed.device.c_str(), atTick.size(), atResponse.size(), static_cast<unsigned long long>(atSigint),
                static_cast<unsigned long long>(atStart), static_cast<unsigned long long>(budgetYields));
    ASSERT_GE(atTick.size(), kTicks);  // one more may come before the signal is read
    // Every tick came while round trips went on: the counter moved between any two ticks.
    size_t progressed = 0;
    for (size_t i = 1; i < atTick.size(); ++i) progressed += atTick[i] > atTick[i - 1];
    EXPECT_GE(progressed, kTicks - 3) << "ticks bunched up: the flood had them wait";
    // HTTP answered during the flood, each response between round trips.
    ASSERT_GE(atResponse.size(), 5u) << "the HTTP server was not served during the flood";
    EXPECT_EQ(probe.failures(), 0u);
    for (size_t i = 1; i < atResponse.size(); ++i) EXPECT_GT(atResponse[i], atResponse[i - 1]);
    // SIGINT was handled while the flood was still running: no client had finished.
    for (uint64_t n : perClientAtSigint) EXPECT_LT(n, kEndless);  // (the handlers are gone with their clients)
    EXPECT_GT(atSigint, atTick.back() - 1);
    hostapp::Spread late = hostapp::spreadOf(ticks.latenessMicros());
    hostapp::Spread http_ = hostapp::spreadOf(probe.responseMicros());
    std::printf("[ figures  ] timer lateness: median %.0f us, p99 %.0f us, max %.0f us; HTTP response: median %.0f us, "
                "p99 %.0f us, max %.0f us\n",
                late.median, late.p99, late.max, http_.median, http_.p99, http_.max);
  }
  event_base_free(base);
}

}  // namespace
