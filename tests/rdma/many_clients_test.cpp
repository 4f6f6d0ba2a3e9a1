// A burst of concurrent connects against one server, as a demo server meets it: every client
// process starts all its connections at once, and every connection verifies every byte of its
// echoes. The listener's backlog must hold the burst (past it the kernel drops requests and the
// clients time out), and the one server thread must serve them all.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;

TEST_F(PingPongBed, ABurstOfConcurrentClientsAllConnectAndEveryEchoIsVerified) {
  // rxe: 1000 clients (with the old backlog of 128, 595 of them got through). soft-iWARP maps every
  // queue into the process and allows about 70 connections per process (the server's included):
  // there 48 clients, in 4 processes as on rxe.
  const bool iwarp = evrdma::test::onIwarp();
  const int processes = 4, perProcess = iwarp ? 12 : 250, clients = processes * perProcess;
  // Under light stress (the sanitizer and valgrind stages) the server runs many times slower, and
  // under valgrind it answered some of the 1000 connects after the clients' default connectTimeout
  // of 10 s; there they wait 60 s. (The plain stages keep the 10 s that shows a backlog too small.)
  std::vector<std::string> options{"-n", std::to_string(perProcess), "-c", "3", "-s", "64", "-v"};
  if (lightStress()) options.insert(options.end(), {"-C", "60000"});
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) children.push_back(spawnPingClient(options));
  int failedProcesses = 0;
  for (pid_t child : children) {
    int status = serveUntilChildExits(child, 240s);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failedProcesses;
      ADD_FAILURE() << "pingpong-client status " << status;
    }
  }
  EXPECT_TRUE(runUntil([&] { return factory_->activeAgents == 0; }, 60s)) << "agents still open";
  EXPECT_EQ(failedProcesses, 0);
  EXPECT_EQ(factory_->agentsServed, static_cast<uint64_t>(clients));
  EXPECT_EQ(factory_->agentsFailed, 0u);
  EXPECT_EQ(factory_->agentsIncomplete, 0u);
  EXPECT_EQ(factory_->totalEchoes, static_cast<uint64_t>(clients) * 3);
  EXPECT_EQ(listener_->stats().rejected, 0u);
  std::printf("[ figures  ] %d concurrent clients in %d processes, 3 verified round trips each: %llu agents served, "
              "%llu rejected, %llu failed\n",
              clients, processes, static_cast<unsigned long long>(factory_->agentsServed),
              static_cast<unsigned long long>(listener_->stats().rejected),
              static_cast<unsigned long long>(factory_->agentsFailed));
}

// 100 clients in 4 processes against one server: rxe serves them all; soft-iWARP refuses queue
// pairs past about 70 per process, and the server then rejects the rest with words that say so
// (not a bare "Resource temporarily unavailable"), while every client process ends: nothing hangs.
TEST_F(PingPongBed, PastTheDevicesQueuePairLimitRequestsAreRejectedNamingItAndNothingHangs) {
  const bool iwarp = evrdma::test::onIwarp();
  std::vector<std::string> errors;
  factory_->agentClosedHook = [&](const pingpong::EchoAgent& agent, const evrdma::Connection&) {
    if (!agent.error.empty()) errors.push_back(agent.error);
  };
  const int processes = 4, perProcess = 25;
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i)
    children.push_back(spawnPingClient({"-n", std::to_string(perProcess), "-c", "3", "-s", "64", "-v", "-k"}));
  // -k: every client holds its connection until all of its process's have finished, so the
  // agents exist at once; then SIGINT.
  ASSERT_TRUE(runUntil([&] { return factory_->agentsServed + factory_->activeAgents >= processes * perProcess ||
                                    listener_->stats().requests >= static_cast<uint64_t>(processes * perProcess); },
                       120s));
  // Then until each request is decided (accepted, rejected naming the limit, or given up).
  ASSERT_TRUE(runUntil([&] {
    const evrdma::ListenerStats s = listener_->stats();
    return s.requests >= static_cast<uint64_t>(processes * perProcess) && s.accepted + s.rejected + s.abandoned >= s.requests;
  }, 120s)) << "requests never answered";
  for (pid_t child : children) kill(child, SIGINT);
  int hung = 0;
  for (pid_t child : children)
    if (serveUntilChildExits(child, 60s) == -1) ++hung;
  EXPECT_EQ(hung, 0) << "a client process did not end";
  EXPECT_TRUE(runUntil([&] { return factory_->activeAgents == 0; }, 60s)) << "agents still open";
  const uint64_t rejected = listener_->stats().rejected;
  std::printf("[ figures  ] %d clients in %d processes on %s: %llu agents served, %llu rejected%s%s\n",
              processes * perProcess, processes, iwarp ? "siw" : "rxe",
              static_cast<unsigned long long>(factory_->agentsServed - factory_->agentsFailed),
              static_cast<unsigned long long>(rejected), errors.empty() ? "" : ", e.g. ",
              errors.empty() ? "" : errors[0].c_str());
  if (iwarp) {
    EXPECT_GT(rejected, 0u) << "siw held more than its documented limit: update docs/limitations.md and this test";
    for (const auto& e : errors)
      EXPECT_NE(e.find("soft-iWARP (siw) holds about 70 queue pairs per process"), std::string::npos) << e;
  } else {
    EXPECT_EQ(rejected, 0u);
    EXPECT_TRUE(errors.empty()) << errors[0];
  }
}

}  // namespace
