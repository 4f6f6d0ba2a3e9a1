// One loop per core over real RDMA: a Listener on the test's Reactor hands every accepted
// connection to one of two worker Reactors on threads of their own (ListenerOptions::workers);
// each agent's queue pair, completions and callbacks live on its worker from then on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "PingPong.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Watch.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

using evrdma::test::runUntil;

// What the agents share across the worker threads.
struct AgentThreads {
  std::mutex mutex;
  std::set<std::thread::id> threads;  // where agents' callbacks ran
  std::atomic<int> established{0}, closed{0}, failed{0};
};

// Echoes every message; notes the thread its callbacks run on.
struct EchoOnWorker : evrdma::ConnectionHandler {
  AgentThreads& shared;
  explicit EchoOnWorker(AgentThreads& s) : shared(s) {}
  void note() {
    std::lock_guard<std::mutex> lock(shared.mutex);
    shared.threads.insert(std::this_thread::get_id());
  }
  void onEstablished(evrdma::Connection&) noexcept override {
    note();
    ++shared.established;
  }
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    note();
    if (c.postSend(data, length) != 0) ++shared.failed;
  }
  void onError(evrdma::Connection&, int, const char*) noexcept override { ++shared.failed; }
  void onClosed(evrdma::Connection&) noexcept override { ++shared.closed; }
};

// Decides on the listening thread; the handler it makes runs on a worker.
struct EchoOnWorkersFactory : evrdma::AgentFactory {
  AgentThreads shared;
  std::thread::id decidedOn;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    decidedOn = std::this_thread::get_id();
    evrdma::ConnectionOptions options;
    options.maxMessageSize = 64;
    options.recvDepth = 2;
    options.sendDepth = 2;
    return evrdma::AcceptDecision::accept(std::make_unique<EchoOnWorker>(shared), options);
  }
};

class Workers : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed_));
    ASSERT_TRUE(first_.valid());
    ASSERT_TRUE(second_.valid());
    evrdma::ListenerOptions options;
    options.workers = {&first_.reactor(), &second_.reactor()};
    listener_ = evrdma::Listener::create(reactor_, factory_, options);
    ASSERT_EQ(listener_->listen(bed_.ip, 0), 0);
  }
  // Ping-sr clients of 64 B messages on the listening Reactor's thread, every echo verified; each
  // result lands in results_ once its connection has closed.
  // `held`: if given, the clients wait once established until start() (their pointers land there).
  void connectClients(int count, const pingsr::ConnectInfo& info, std::vector<pingpong::PingClient*>* held = nullptr) {
    evrdma::ClientOptions options;
    options.maxMessageSize = 64;
    options.recvDepth = 2;
    options.sendDepth = 2;
    for (int i = 0; i < count; ++i) {
      auto handler = std::make_unique<pingpong::PingClient>(static_cast<uint32_t>(i), info, true, pingpong::Trace::Off,
                                                            [this](const pingpong::PingResult& r) { results_.push_back(r); });
      handler->setRoundTripTimeout(std::chrono::seconds(10));  // a lost echo is reported, not waited for
      if (held != nullptr) {
        handler->waitForStart([this] { ++heldEstablished_; });
        held->push_back(handler.get());
      }
      clients_.push_back(evrdma::Client::create(reactor_, std::move(handler), options));
      ASSERT_EQ(clients_.back()->connect(bed_.ip, listener_->port(), pingsr::encode(info)), 0);
    }
  }

  evrdma::test::TestBed bed_;
  EchoOnWorkersFactory factory_;  // declared first: it outlives the workers' agents
  evrdma::ReactorThread first_, second_;
  evrdma::Reactor reactor_;
  evrdma::Listener::Ptr listener_;
  std::vector<pingpong::PingResult> results_;
  std::vector<evrdma::Client::Ptr> clients_;
  int heldEstablished_ = 0;  // held clients established (on the test's thread)
};

TEST_F(Workers, AgentsLandOnEveryWorkerThreadAndEveryEchoIsVerified) {
  // 24 clients (both ends in one process: siw holds ~70 queue pairs per process), 200 round trips.
  constexpr int kClients = 24;
  const pingsr::ConnectInfo info{200, 64};
  size_t mostAgents = 0;
  std::vector<evrdma::WorkerFigures> atMost;
  connectClients(kClients, info);
  ASSERT_TRUE(runUntil(reactor_, [&] {
    if (listener_->agentCount() > mostAgents) {
      mostAgents = listener_->agentCount();
      atMost = listener_->workerFigures();
    }
    return results_.size() == static_cast<size_t>(kClients);
  }, 120s)) << results_.size() << " of " << kClients << " clients finished";
  for (const pingpong::PingResult& r : results_) {
    EXPECT_TRUE(r.succeeded) << "client " << r.index << ": " << r.error;
    EXPECT_EQ(r.roundTrips, info.count) << "client " << r.index;
  }
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.shared.closed == kClients; }, 30s));

  const std::vector<evrdma::WorkerFigures> figures = listener_->workerFigures();
  ASSERT_EQ(figures.size(), 2u);
  uint64_t accepted = 0;
  for (size_t w = 0; w < figures.size(); ++w) {
    std::printf("worker %zu: %llu accepted, %llu closed, %llu rejected, %llu abandoned, %zu agents at the most\n", w,
                static_cast<unsigned long long>(figures[w].accepted), static_cast<unsigned long long>(figures[w].closed),
                static_cast<unsigned long long>(figures[w].rejected),
                static_cast<unsigned long long>(figures[w].abandoned), atMost.empty() ? 0 : atMost[w].agents);
    EXPECT_GE(figures[w].accepted, 1u) << "worker " << w << " got no agent";
    EXPECT_EQ(figures[w].agents, 0u);
    EXPECT_EQ(figures[w].closed, figures[w].accepted);
    accepted += figures[w].accepted;
  }
  EXPECT_EQ(accepted, static_cast<uint64_t>(kClients));
  EXPECT_EQ(listener_->agentCount(), 0u);
  EXPECT_EQ(factory_.shared.established.load(), kClients);
  EXPECT_EQ(factory_.shared.failed.load(), 0);
  EXPECT_EQ(factory_.decidedOn, std::this_thread::get_id()) << "the factory decides on the listening thread";
  std::lock_guard<std::mutex> lock(factory_.shared.mutex);
  EXPECT_EQ(factory_.shared.threads.size(), 2u) << "the agents ran on both workers";
  EXPECT_EQ(factory_.shared.threads.count(std::this_thread::get_id()), 0u) << "an agent ran on the listening thread";
}

// Dropping the Listener closes the agents it handed to its workers, each on its own thread.
TEST_F(Workers, DroppingTheListenerClosesTheAgentsOnTheWorkers) {
  constexpr int kClients = 8;
  connectClients(kClients, pingsr::ConnectInfo{1000000, 64});  // round trips for longer than the test
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.shared.established == kClients; }, 60s));
  listener_.reset();
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.shared.closed == kClients && results_.size() == kClients; }, 60s))
      << factory_.shared.closed << " agents and " << results_.size() << " clients closed of " << kClients;
  for (const pingpong::PingResult& r : results_) EXPECT_FALSE(r.succeeded) << "client " << r.index;
}

// A drain counts the agents on the workers: those that finish within the grace finish, the rest
// are closed on their threads when it runs out, and `drained` fires on the listening thread after
// the last of them.
TEST_F(Workers, ADrainWaitsForTheAgentsOnTheWorkersAndClosesThoseLeftAfterTheGrace) {
  // The short clients are held, established, until the drain has begun: their 5 round trips run
  // inside the grace however slow the build (under valgrind, 100 round trips each, started before
  // the drain, did not finish within it next to the endless clients' flood).
  constexpr int kShort = 4, kEndless = 4;
  std::vector<pingpong::PingClient*> shortClients;
  connectClients(kShort, pingsr::ConnectInfo{5, 64}, &shortClients);
  connectClients(kEndless, pingsr::ConnectInfo{1000000, 64});
  // Both ends: an agent can be established before its client has heard so (siw establishes the
  // passive side once it has sent its MPA reply). A client not yet established when started used
  // to ignore start(), and made no round trip.
  ASSERT_TRUE(runUntil(reactor_, [&] {
    return factory_.shared.established == kShort + kEndless && heldEstablished_ == kShort;
  }, 60s));
  bool drained = false;
  std::thread::id drainedOn;
  const auto start = std::chrono::steady_clock::now();
  listener_->drain(3000ms, [&] {
    drained = true;
    drainedOn = std::this_thread::get_id();
  });
  for (pingpong::PingClient* client : shortClients) client->start();
  ASSERT_TRUE(runUntil(reactor_, [&] { return drained; }, 60s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 3000ms) << "the endless agents were given the grace";
  EXPECT_EQ(drainedOn, std::this_thread::get_id());
  EXPECT_EQ(listener_->agentCount(), 0u);
  EXPECT_EQ(factory_.shared.closed.load(), kShort + kEndless);
  ASSERT_TRUE(runUntil(reactor_, [&] { return results_.size() == kShort + kEndless; }, 30s));
  int finished = 0;
  std::string others;  // what ended the clients that did not finish, for a failure's message
  for (const pingpong::PingResult& r : results_) {
    finished += r.succeeded ? 1 : 0;
    if (!r.succeeded)
      others += "\n  client " + std::to_string(r.index) + " after " + std::to_string(r.roundTrips) + " round trips: " +
                r.error;
  }
  EXPECT_EQ(finished, kShort) << "the short clients finished within the grace, the endless ones were closed:" << others;
}

// A storm handed over at once is set up at most acceptsPerTurn per turn of each worker's loop (the
// rest on later turns, its connected peers served between them), and every handler the factory
// made hears onClosed, also when its client gave up before the worker could take its request.
// Both workers are held busy until every request was handed over, so each finds the whole storm
// in its mailbox at once.
TEST_F(Workers, HandedOverRequestsAreSetUpAtMostAcceptsPerTurnAndEveryHandlerHearsOnClosed) {
  constexpr int kPatient = 16, kImpatient = 2;
  evrdma::ListenerOptions options;
  options.workers = {&first_.reactor(), &second_.reactor()};
  options.acceptsPerTurn = 2;
  listener_.reset();
  listener_ = evrdma::Listener::create(reactor_, factory_, options);
  ASSERT_EQ(listener_->listen(bed_.ip, 0), 0);
  std::atomic<bool> release{false};
  std::atomic<int> held{0};
  for (evrdma::ReactorThread* worker : {&first_, &second_})
    ASSERT_EQ(worker->reactor().post([&] {
      ++held;
      while (!release.load()) std::this_thread::sleep_for(1ms);  // a busy worker: until told
    }), 0);
  ASSERT_TRUE(runUntil(reactor_, [&] { return held == 2; }, 30s));

  // The impatient ones give up (connectTimeout) while their requests wait on the workers.
  evrdma::ClientOptions impatient;
  impatient.maxMessageSize = 64;
  impatient.recvDepth = impatient.sendDepth = 2;
  impatient.connectTimeout = 300ms;
  const pingsr::ConnectInfo info{20, 64};
  for (int i = 0; i < kImpatient; ++i) {
    auto handler = std::make_unique<pingpong::PingClient>(static_cast<uint32_t>(100 + i), info, true,
                                                          pingpong::Trace::Off,
                                                          [this](const pingpong::PingResult& r) { results_.push_back(r); });
    clients_.push_back(evrdma::Client::create(reactor_, std::move(handler), impatient));
    ASSERT_EQ(clients_.back()->connect(bed_.ip, listener_->port(), pingsr::encode(info)), 0);
  }
  ASSERT_TRUE(runUntil(reactor_, [&] { return results_.size() == kImpatient && listener_->stats().accepted == kImpatient; },
                       60s))
      << results_.size() << " impatient clients gave up, " << listener_->stats().accepted << " requests handed over";
  connectClients(kPatient, info);
  ASSERT_TRUE(runUntil(reactor_, [&] { return listener_->stats().accepted == kPatient + kImpatient; }, 60s))
      << listener_->stats().accepted << " of " << kPatient + kImpatient << " requests handed over";
  release = true;

  ASSERT_TRUE(runUntil(reactor_, [&] { return results_.size() == kPatient + kImpatient; }, 120s))
      << results_.size() << " of " << kPatient + kImpatient << " clients finished";
  int succeeded = 0;
  for (const pingpong::PingResult& r : results_) {
    succeeded += r.succeeded ? 1 : 0;
    if (r.index < 100) {
      EXPECT_TRUE(r.succeeded) << "client " << r.index << ": " << r.error;
    }
  }
  EXPECT_EQ(succeeded, kPatient);
  ASSERT_TRUE(runUntil(reactor_, [&] { return factory_.shared.closed == kPatient + kImpatient; }, 60s))
      << factory_.shared.closed << " of the " << kPatient + kImpatient << " handlers the factory made heard onClosed";
  EXPECT_EQ(factory_.shared.established.load(), kPatient);
  uint64_t held_later = 0, abandoned = 0;
  for (const evrdma::WorkerFigures& f : listener_->workerFigures()) {
    std::printf("worker: %llu accepted, %llu abandoned, %llu held for a later turn, at most %u set up in one turn\n",
                static_cast<unsigned long long>(f.accepted), static_cast<unsigned long long>(f.abandoned),
                static_cast<unsigned long long>(f.heldForLaterTurn), f.mostInOneTurn);
    EXPECT_LE(f.mostInOneTurn, options.acceptsPerTurn) << "a worker set up more than acceptsPerTurn in one turn";
    EXPECT_EQ(f.agents, 0u);
    held_later += f.heldForLaterTurn;
    abandoned += f.abandoned;
  }
  EXPECT_GT(held_later, 0u) << "no worker found more than acceptsPerTurn waiting: the test proved nothing";
  EXPECT_EQ(abandoned, static_cast<uint64_t>(kImpatient));
}

}  // namespace
