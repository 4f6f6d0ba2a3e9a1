// Ping-sr round trips over real RDMA with the library's Listener, Agent and Client: every size
// from 1 B to 1 MiB verified, 64 concurrent clients, a client killed mid-run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "MemoryLock.h"
#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;

class PingPongSizes : public PingPongBed, public ::testing::WithParamInterface<size_t> {};

TEST_P(PingPongSizes, EveryEchoComesBackVerified) {
  const size_t size = GetParam();
  const uint64_t count = size >= (1u << 20) ? 8 : 50;
  startClient(count, size);
  ASSERT_TRUE(runUntil([&] { return allClientsDone(); }, 60s)) << "no result within 60 s";
  ASSERT_EQ(results_.size(), 1u);
  EXPECT_TRUE(results_[0].succeeded) << results_[0].error;
  EXPECT_EQ(results_[0].roundTrips, count);
  EXPECT_EQ(results_[0].verifiedBytes, count * size);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 0; }, 10s)) << "the agent never closed";
  EXPECT_EQ(factory_->totalEchoes, count);
  EXPECT_EQ(factory_->agentsFailed, 0u) << "the agent heard: " << factory_->firstAgentError;
}

INSTANTIATE_TEST_SUITE_P(OneByteToOneMebibyte, PingPongSizes, ::testing::Values(1, 64, 4096, 65536, 1 << 20),
                         [](const ::testing::TestParamInfo<size_t>& param) { return std::to_string(param.param) + "B"; });

// A poll's completions reach their own connections, whichever way the dispatcher hands them
// over: when every one is one connection's (a ping-pong's receive and its previous answer's send),
// straight to its handler with one lookup for the poll; when they are several connections', each
// by its QP. The server alone is in this process: one client's round trips give polls of one
// connection, eight clients' at once give polls of several. A completion handed to the wrong
// connection echoes bytes from another's buffer, which the clients' verification (-v) catches.
TEST_F(PingPongBed, APollsCompletionsReachTheirOwnConnectionsWhetherOneConnectionsOrSeveral) {
  auto pollCounts = [&](uint64_t& withCompletions, uint64_t& ofOneConnection) {
    const evrdma::ReactorStats stats = reactor_.stats();
    withCompletions = ofOneConnection = 0;
    for (const evrdma::DeviceStats& device : stats.devices) {
      for (int n = 1; n <= evrdma::CompletionStats::kBatch; ++n) withCompletions += device.completions.perPoll[n];
      ofOneConnection += device.completions.pollsForOneConnection;
    }
  };
  auto runClients = [&](int clients, int roundTrips) {
    const pid_t child = spawnPingClient({"-n", std::to_string(clients), "-c", std::to_string(roundTrips), "-s", "64", "-v"});
    ASSERT_GT(child, 0);
    const int status = serveUntilChildExits(child, 120s);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "pingpong-client -n " << clients << " -v failed (status " << status << ")";
  };
  uint64_t polls0 = 0, one0 = 0, polls1 = 0, one1 = 0, polls2 = 0, one2 = 0;
  pollCounts(polls0, one0);
  runClients(1, 300);
  pollCounts(polls1, one1);
  runClients(8, 300);
  pollCounts(polls2, one2);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 0; }, 20s));
  EXPECT_EQ(factory_->totalEchoes, 300u * 9);
  EXPECT_EQ(factory_->agentsFailed, 0u);
  std::printf("[ figures  ] one client: %llu of %llu polls with completions were one connection's; eight "
              "clients: %llu of %llu\n",
              static_cast<unsigned long long>(one1 - one0), static_cast<unsigned long long>(polls1 - polls0),
              static_cast<unsigned long long>(one2 - one1), static_cast<unsigned long long>(polls2 - polls1));
  EXPECT_GE(one1 - one0, 300u) << "a lone client's round trips did not take the way without lookups";
  EXPECT_GT((polls2 - polls1) - (one2 - one1), 0u) << "eight clients at once never shared a poll";
}

TEST_F(PingPongBed, SixtyFourConcurrentClientsAllFinishVerified) {
  // The clients live in a second process (64 connections from its one thread), as real clients do.
  constexpr uint64_t kClients = 64, kCount = 40;
  size_t mostAgents = 0;
  evrdma::Timer sample(reactor_, [&] { mostAgents = std::max(mostAgents, listener_->agentCount()); });
  sample.startPeriodic(1ms);
  pid_t child = spawnPingClient({"-n", std::to_string(kClients), "-c", std::to_string(kCount), "-s", "512", "-v"});
  ASSERT_GT(child, 0);
  int status = serveUntilChildExits(child, 120s);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "pingpong-client -n 64 failed (status " << status << ")";
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 0; }, 20s));
  EXPECT_EQ(factory_->totalEchoes, kClients * kCount);
  EXPECT_EQ(factory_->agentsServed, kClients);
  EXPECT_EQ(factory_->agentsFailed, 0u);
  EXPECT_EQ(listener_->stats().accepted, kClients);
  EXPECT_GT(mostAgents, 1u) << "the clients never overlapped";
  std::printf("[ figures  ] 64 clients: at most %zu agents at once\n", mostAgents);
}

// A server that stops answering (here: it swallows the 5th message; in the field: a lost message,
// a stuck peer) is never waited for silently: the round trip times out and says where it stood.
TEST_F(PingPongBed, AnEchoThatNeverComesBackIsReportedAfterTheRoundTripTimeout) {
  class SwallowFifth : public evrdma::ConnectionHandler {
    void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
      if (++received_ != 5) c.postSend(data, length);
    }
    int received_ = 0;
  };
  class Factory : public evrdma::AgentFactory {
    evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
      evrdma::ConnectionOptions options;
      options.maxMessageSize = 64;
      return evrdma::AcceptDecision::accept(std::make_unique<SwallowFifth>(), options);
    }
  } factory;
  std::vector<PingResult> results;
  auto handler = std::make_unique<pingpong::PingClient>(0, pingsr::ConnectInfo{100, 64}, true, pingpong::Trace::Off,
                                                        [&](const PingResult& r) { results.push_back(r); });
  handler->setRoundTripTimeout(300ms);
  evrdma::ClientOptions options;
  options.maxMessageSize = 64;
  Pair pair = listenAndConnect(factory, std::move(handler), options);
  ASSERT_TRUE(runUntil([&] { return !results.empty(); }, 30s)) << "the client never gave up";
  EXPECT_FALSE(results[0].succeeded);
  EXPECT_EQ(results[0].roundTrips, 4u);
  EXPECT_NE(results[0].error.find("round trip 5: no echo within 300 ms"), std::string::npos) << results[0].error;
  std::printf("[ figures  ] %s\n", results[0].error.c_str());
}

// A client held until start() (as pingpong-client -W and the Workers drain test hold theirs) and
// started before it is established starts its round trips once it is, instead of waiting for a
// start that has already come (on siw an agent is established before its client hears so: a test
// that waited for the agents started clients that were not established yet).
TEST_F(PingPongBed, AHeldClientStartedBeforeItIsEstablishedStartsOnceItIs) {
  constexpr uint64_t kCount = 5;
  const pingsr::ConnectInfo info{kCount, 64};
  bool toldEstablished = false;
  auto handler = std::make_unique<pingpong::PingClient>(0, info, true, pingpong::Trace::Off,
                                                        [this](const PingResult& r) { results_.push_back(r); });
  handler->waitForStart([&] { toldEstablished = true; });
  pingpong::PingClient& ping = *handler;  // owned by the Client from here on
  evrdma::ClientOptions options;
  options.maxMessageSize = 64;
  clients_.push_back(evrdma::Client::create(reactor_, std::move(handler), options));
  ASSERT_EQ(clients_.back()->connect(bed_.ip, port_, pingsr::encode(info)), 0);
  ping.start();  // the loop has not run yet: the connection is still resolving the address
  ASSERT_TRUE(runUntil([&] { return allClientsDone(); }, 20s))
      << "no result within 20 s (told established: " << toldEstablished << ", round trips "
      << ping.result().roundTrips << ")";
  EXPECT_TRUE(toldEstablished) << "the client still says it is established";
  EXPECT_TRUE(results_[0].succeeded) << results_[0].error;
  EXPECT_EQ(results_[0].roundTrips, kCount);
}

// Connections with small buffers take them from the device's shared arena: 100 connections of
// 64-byte messages (both ends in this process: 400 rings and send buffers) pin a few slabs, where
// a region of their own each pinned 2 pages per end (1600 KiB; on siw 24 connections, 384 KiB).
TEST_F(PingPongBed, AHundredSmallConnectionsPinAFewSharedSlabsNotPagesOfTheirOwn) {
  startClient(1, 64);  // the device's first connection: PD, CQ, spare slabs
  ASSERT_TRUE(runUntil([&] { return allClientsDone() && listener_->agentCount() == 0; }, 30s));
  const uint64_t before = evrdma::detail::currentMemoryLockState().pinned;
  // siw allows about 70 queue pairs per process (both ends count here).
  const size_t kConnections = evrdma::test::onIwarp() ? 24 : 100;
  for (size_t i = 0; i < kConnections; ++i) startClient(1000000, 64);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == kConnections; }, 60s));
  ASSERT_TRUE(runUntil([&] {
    for (auto& c : clients_)
      if (c->state() != evrdma::ConnectionState::Established && c->state() != evrdma::ConnectionState::Closed) return false;
    return true;
  }, 60s));
  const uint64_t during = evrdma::detail::currentMemoryLockState().pinned;
  for (auto& c : clients_) c->close();
  ASSERT_TRUE(runUntil([&] { return allClientsDone() && listener_->agentCount() == 0; }, 60s));
  const double perConnection = (during - before) / 1024.0 / kConnections;
  std::printf("[ figures  ] %zu connections of 64 B messages, both ends in one process: %.1f KiB pinned in all, "
              "%.2f KiB per connection (both ends)\n",
              kConnections, (during - before) / 1024.0, perConnection);
  EXPECT_LE(during - before, 256u * 1024) << "small buffers are not shared";
}

TEST_F(PingPongBed, AClientKilledMidRunLeavesTheServerServingTheOthers) {
  // A second process, killed with SIGKILL while it ping-pongs; its kernel resources die with it.
  pid_t child = spawnPingClient({"-c", "100000000", "-s", "64"});
  ASSERT_GT(child, 0);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 1; }, 30s)) << "the child never connected";
  auto echoedByAgents = [&] {
    uint64_t echoed = 0;
    listener_->forEachAgent([&](evrdma::Agent& agent) { echoed += static_cast<pingpong::EchoAgent&>(agent.handler()).echoed(); });
    return echoed;
  };
  ASSERT_TRUE(runUntil([&] { return echoedByAgents() > 0; }, 30s)) << "the child never ping-ponged";
  for (int i = 0; i < 8; ++i) startClient(200, 256);
  // Until each of them has made a round trip; then kill the child.
  ASSERT_TRUE(runUntil([&] { return everyClientMadeARoundTrip(); }, 30s)) << "a client made no round trip";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  ASSERT_TRUE(runUntil([&] { return allClientsDone() && listener_->agentCount() == 0; }, 60s))
      << "agents left: " << listener_->agentCount() << ", clients done: " << results_.size();
  for (const auto& r : results_) EXPECT_TRUE(r.succeeded) << "client " << r.index << ": " << r.error;
  EXPECT_EQ(factory_->agentsServed, 9u);
  EXPECT_EQ(factory_->agentsFailed + factory_->agentsIncomplete, 1u) << "the dead client's agent should end early";
  std::printf("[ figures  ] killed client: agent freed; 8 other clients verified; %llu echoes in all\n",
              static_cast<unsigned long long>(factory_->totalEchoes));
}

TEST_F(PingPongBed, ServerShutsDownCleanlyOnSigintWhileServing) {
  // pingpong-server in a child process, its stdout on a pipe we watch from our own loop.
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t server = fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(PINGPONG_SERVER_PATH, "pingpong-server", "-a", bed_.ip.c_str(), "-p", "0", "-x", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string printed;
  bool outputEnded = false;
  evrdma::FdWatch reader(reactor_, out[0], evrdma::FdWatch::kRead, [&](short) {
    char buf[512];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n > 0) printed.append(buf, static_cast<size_t>(n));
    if (n == 0) outputEnded = true;
  });
  ASSERT_TRUE(runUntil([&] { return printed.find("listening on") != std::string::npos; }, 30s)) << printed;
  auto at = printed.find(" port ");
  uint16_t serverPort = static_cast<uint16_t>(std::stoi(printed.substr(at + 6)));
  port_ = serverPort;
  for (int i = 0; i < 4; ++i) startClient(100000000, 64, true);  // far more than they will get to do
  // SIGINT once every client is served (a sanitized server on siw can take over 300 ms to start
  // them all: a fixed wait here once caught clients that had made no round trip yet).
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(runUntil([&] { return everyClientMadeARoundTrip(); }, 30s)) << "a client made no round trip\n" << printed;
  const auto toServeAll = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started);
  ASSERT_EQ(kill(server, SIGINT), 0);
  int status = -1;
  ASSERT_TRUE(runUntil([&] { return waitpid(server, &status, WNOHANG) == server; }, 30s)) << "server ignored SIGINT";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << printed;
  ASSERT_TRUE(runUntil([&] { return allClientsDone(); }, 30s));
  runUntil([&] { return outputEnded; }, 10s);  // the rest of its output
  for (const auto& r : results_) {
    EXPECT_GT(r.roundTrips, 0u);
    EXPECT_NE(r.error.find("server disconnected"), std::string::npos) << r.error;
  }
  EXPECT_NE(printed.find("closing 4 connections"), std::string::npos) << printed;
  EXPECT_NE(printed.find("served 4 clients (0 failed, 4 left early)"), std::string::npos) << printed;
  std::printf("[ figures  ] every client made a round trip %.0f ms after the connects; SIGINT 100 ms later\n",
              toServeAll.count());
  close(out[0]);
}

}  // namespace
