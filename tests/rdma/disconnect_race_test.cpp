// A peer that disconnects the instant its last echo was sent (as the OFA notes' agent does): the
// client, in its own process like a real one, may read DISCONNECTED from the CM channel before the
// completion channel tells it of that echo. The echo must still reach onRecv, before
// onDisconnected, every time.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;

TEST_F(PingPongBed, AnEchoSentJustBeforeThePeerDisconnectsIsNeverLost) {
  factory_->disconnectAfterLastEcho = true;
  // On iWARP an agent's last echo can complete in error although the client got it: the client
  // closes as soon as it has it, and soft-iWARP fails a send whose bytes went out if the peer's FIN
  // lands before its transmit thread is done with it (siw_qp_tx.c: tx_suspend after the last
  // segment). The agent is told so (-ECONNABORTED, both causes named); every echo reaching its
  // client is what this test proves, and any other failure still fails it.
  const bool iwarp = onIwarp();
  auto brokeAsTheClientClosed = std::make_shared<uint64_t>(0);  // the hook may outlive this body (TearDown)
  factory_->agentClosedHook = [iwarp, brokeAsTheClientClosed](const pingpong::EchoAgent& agent,
                                                              const evrdma::Connection& c) {
    if (iwarp && agent.echoed() == agent.info().count &&
        agent.error.find("the connection broke during the send") != std::string::npos) {
      ++*brokeAsTheClientClosed;
      return;
    }
    // The server's side of a conversation that did not finish, or that failed after it had.
    if (agent.echoed() < agent.info().count || !agent.error.empty())
      // Flushed: posted, never executed by the device; dropped: queued behind a full send queue;
      // waiting: refused by the connection (-ENOBUFS), kept by the agent for a later send.
      std::fprintf(stderr,
                   "agent for %s closed %s after %llu of %llu echoes: received %llu, sent %llu, flushed %llu, "
                   "dropped %llu, waiting in the agent %zu%s%s\n",
                   c.peerAddress().c_str(), evrdma::toString(c.state()),
                   static_cast<unsigned long long>(agent.echoed()), static_cast<unsigned long long>(agent.info().count),
                   static_cast<unsigned long long>(c.stats().messagesReceived),
                   static_cast<unsigned long long>(c.stats().messagesSent),
                   static_cast<unsigned long long>(c.stats().flushedCompletions),
                   static_cast<unsigned long long>(c.stats().requestsDropped), agent.echoesWaiting(),
                   agent.error.empty() ? "" : ": ", agent.error.c_str());
  };
  // Under light stress (the sanitizer and valgrind stages): a quarter of the processes.
  const int kProcessesPerCount = lightStress() ? 10 : 40;
  constexpr int kClientsPerProcess = 5;
  int failedProcesses = 0;
  for (uint64_t count = 1; count <= 3; ++count) {
    for (int run = 0; run < kProcessesPerCount; ++run) {
      pid_t child = spawnPingClient({"-n", std::to_string(kClientsPerProcess), "-c", std::to_string(count), "-s", "64",
                                     "-v"});
      int status = serveUntilChildExits(child, 60s);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failedProcesses;
        ADD_FAILURE() << "count " << count << ", run " << run << ": pingpong-client status " << status;
      }
    }
  }
  EXPECT_EQ(factory_->agentsFailed, *brokeAsTheClientClosed);
  EXPECT_EQ(factory_->agentsIncomplete, 0u);
  std::printf("[ figures  ] %d clients in %d processes (count 1, 2, 3) against a server that disconnects right "
              "after its last echo: %d processes lost an echo; %llu agents' last echo broke as its client closed\n",
              3 * kProcessesPerCount * kClientsPerProcess, 3 * kProcessesPerCount, failedProcesses,
              static_cast<unsigned long long>(*brokeAsTheClientClosed));
}

}  // namespace
