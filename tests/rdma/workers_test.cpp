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
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;

bool runUntil(evrdma::Reactor& reactor, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool reached = false;
  evrdma::Timer check(reactor, [&] {
    reached = done();
    if (reached || std::chrono::steady_clock::now() > deadline) reactor.stop();
  });
  check.startPeriodic(2ms);
  reactor.run();
  return reached;
}

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

TEST(Workers, AgentsLandOnEveryWorkerThreadAndEveryEchoIsVerified) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  EchoOnWorkersFactory factory;  // declared first: it outlives the workers' agents
  evrdma::ReactorThread first, second;
  ASSERT_TRUE(first.valid());
  ASSERT_TRUE(second.valid());
  evrdma::Reactor reactor;
  evrdma::ListenerOptions options;
  options.workers = {&first.reactor(), &second.reactor()};
  auto listener = evrdma::Listener::create(reactor, factory, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);

  // Clients on the listening Reactor's thread: 24 of them (both ends in one process: siw holds
  // ~70 queue pairs per process), 200 verified round trips of 64 B each.
  constexpr int kClients = 24;
  const pingsr::ConnectInfo info{200, 64};
  std::vector<pingpong::PingResult> results;
  std::vector<evrdma::Client::Ptr> clients;
  evrdma::ClientOptions clientOptions;
  clientOptions.maxMessageSize = 64;
  clientOptions.recvDepth = 2;
  clientOptions.sendDepth = 2;
  size_t mostAgents = 0;
  std::vector<evrdma::WorkerFigures> atMost;
  for (int i = 0; i < kClients; ++i) {
    auto handler = std::make_unique<pingpong::PingClient>(static_cast<uint32_t>(i), info, true, pingpong::Trace::Off,
                                                          [&](const pingpong::PingResult& r) { results.push_back(r); });
    clients.push_back(evrdma::Client::create(reactor, std::move(handler), clientOptions));
    ASSERT_EQ(clients.back()->connect(bed.ip, listener->port(), pingsr::encode(info)), 0);
  }
  ASSERT_TRUE(runUntil(reactor, [&] {
    if (listener->agentCount() > mostAgents) {
      mostAgents = listener->agentCount();
      atMost = listener->workerFigures();
    }
    return results.size() == static_cast<size_t>(kClients);
  }, 120s)) << results.size() << " of " << kClients << " clients finished";
  for (const pingpong::PingResult& r : results) {
    EXPECT_TRUE(r.succeeded) << "client " << r.index << ": " << r.error;
    EXPECT_EQ(r.roundTrips, info.count) << "client " << r.index;
  }
  ASSERT_TRUE(runUntil(reactor, [&] { return factory.shared.closed == kClients; }, 30s));

  const std::vector<evrdma::WorkerFigures> figures = listener->workerFigures();
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
  EXPECT_EQ(listener->agentCount(), 0u);
  EXPECT_EQ(factory.shared.established.load(), kClients);
  EXPECT_EQ(factory.shared.failed.load(), 0);
  EXPECT_EQ(factory.decidedOn, std::this_thread::get_id()) << "the factory decides on the listening thread";
  std::lock_guard<std::mutex> lock(factory.shared.mutex);
  EXPECT_EQ(factory.shared.threads.size(), 2u) << "the agents ran on both workers";
  EXPECT_EQ(factory.shared.threads.count(std::this_thread::get_id()), 0u) << "an agent ran on the listening thread";
}

// Dropping the Listener closes the agents it handed to its workers, each on its own thread.
TEST(Workers, DroppingTheListenerClosesTheAgentsOnTheWorkers) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  EchoOnWorkersFactory factory;
  evrdma::ReactorThread first, second;
  evrdma::Reactor reactor;
  evrdma::ListenerOptions options;
  options.workers = {&first.reactor(), &second.reactor()};
  auto listener = evrdma::Listener::create(reactor, factory, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  constexpr int kClients = 8;
  const pingsr::ConnectInfo info{1000000, 64};  // round trips for longer than the test
  std::vector<pingpong::PingResult> results;
  std::vector<evrdma::Client::Ptr> clients;
  for (int i = 0; i < kClients; ++i) {
    auto handler = std::make_unique<pingpong::PingClient>(static_cast<uint32_t>(i), info, true, pingpong::Trace::Off,
                                                          [&](const pingpong::PingResult& r) { results.push_back(r); });
    evrdma::ClientOptions clientOptions;
    clientOptions.maxMessageSize = 64;
    clients.push_back(evrdma::Client::create(reactor, std::move(handler), clientOptions));
    ASSERT_EQ(clients.back()->connect(bed.ip, listener->port(), pingsr::encode(info)), 0);
  }
  ASSERT_TRUE(runUntil(reactor, [&] { return factory.shared.established == kClients; }, 60s));
  listener.reset();
  ASSERT_TRUE(runUntil(reactor, [&] { return factory.shared.closed == kClients && results.size() == kClients; }, 60s))
      << factory.shared.closed << " agents and " << results.size() << " clients closed of " << kClients;
  for (const pingpong::PingResult& r : results) EXPECT_FALSE(r.succeeded) << "client " << r.index;
}

}  // namespace
