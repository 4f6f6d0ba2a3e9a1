// A peer that disconnects the instant its last echo was sent (as the OFA notes' agent does): the
// client, in its own process like a real one, may read DISCONNECTED from the CM channel before the
// completion channel tells it of that echo. The echo must still reach onRecv, before
// onDisconnected, every time. And when either side closes the instant it has sent or read the
// last message, no close waits for the disconnect timer.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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

// Sends `kMessages` the moment it is established, and closes at once.
constexpr int kMessages = 12;
struct SendThenClose : evrdma::ConnectionHandler {
  void onEstablished(evrdma::Connection& c) noexcept override {
    for (int i = 0; i < kMessages; ++i) (void)c.postSend("sent", 4);
    c.close();
  }
};
// Both sides wait for the disconnect timer only in a case no test here makes: a close that needs it
// never comes within the test's bound.
constexpr std::chrono::minutes kDisconnectTimeout{10};
struct SendThenCloseFactory : evrdma::AgentFactory {
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    evrdma::ConnectionOptions options;
    options.maxMessageSize = 64;
    options.sendDepth = kMessages;
    options.disconnectTimeout = kDisconnectTimeout;
    return evrdma::AcceptDecision::accept(std::make_unique<SendThenClose>(), options);
  }
};
struct CountsUntilClosed : evrdma::ConnectionHandler {
  uint64_t received = 0;
  bool closed = false;
  void onRecv(evrdma::Connection&, const uint8_t*, size_t) noexcept override { ++received; }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

// Answers every message it reads: its answers to the last ones are posted after the peer closed.
struct AnswersUntilClosed : CountsUntilClosed {
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t size) noexcept override {
    CountsUntilClosed::onRecv(c, data, size);
    (void)c.postSend("answer", 6);
  }
};

// Closes once it has read every message.
struct ClosesAtTheLastMessage : evrdma::ConnectionHandler {
  uint64_t received = 0;
  bool closed = false;
  void onRecv(evrdma::Connection& c, const uint8_t*, size_t) noexcept override {
    if (++received == kMessages) c.close();
  }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

// Clients of a SendThenCloseFactory, each with a Handler and a 10-minute disconnect timeout, many
// at once (so the race is met): every one, and every agent, must close well before that. `who`
// names them in the figures line.
template <typename Handler>
void expectEveryClientCloses(evrdma::Reactor& reactor, const evrdma::test::TestBed& testBed, const char* who) {
  SendThenCloseFactory factory;
  const int clients = lightStress() ? 10 : 30;
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(testBed.ip, 0), 0);
  std::vector<evrdma::Client::Ptr> all;
  std::vector<Handler*> handlers;
  for (int i = 0; i < clients; ++i) {
    auto handler = std::make_unique<Handler>();
    handlers.push_back(handler.get());
    evrdma::ClientOptions options;
    options.maxMessageSize = 64;
    options.recvDepth = 16;  // room for every message: each is posted again as it is read
    options.sendDepth = 16;  // and for an answer to each
    options.disconnectTimeout = kDisconnectTimeout;
    all.push_back(evrdma::Client::create(reactor, std::move(handler), options));
    EXPECT_EQ(all.back()->connect(testBed.ip, listener->port()), 0);
  }
  EXPECT_TRUE(evrdma::test::runUntil(reactor, [&] {
    for (const Handler* h : handlers)
      if (!h->closed) return false;
    return true;
  }, 120s)) << "a client's close waited for the disconnect timer";
  uint64_t received = 0;
  for (const Handler* h : handlers) received += h->received;
  std::printf("[ figures  ] %d clients %s %d messages: %llu read\n", clients, who, kMessages,
              static_cast<unsigned long long>(received));
  all.clear();
  listener.reset();
  EXPECT_TRUE(runUntilNoConnections(reactor, 120s)) << "an agent's close waited for the disconnect timer";
}

// On iWARP the peer's close flushes this side's posted receives in the kernel while the loop may
// not yet have read the completions of the last messages; the receives it then posts again go into
// soft-iWARP's queue after the flush, and the device never returns them. Such a close waited for
// the disconnect timer (3 s by default; a Reactor's linger at exit 5 s): once the peer is gone
// those receives are taken back with the queue pair.
TEST_F(PingPongBed, APeerThatClosesTheInstantItHasSentLeavesNoReceiveWaitingForTheDisconnectTimer) {
  expectEveryClientCloses<CountsUntilClosed>(reactor_, bed_, "of a peer that closed the instant it had sent");
}

// The same when both sides close at once: this one as soon as it has read the last message, before
// it has read the peer's disconnect (DISCONNECTED then ends a close already begun).
TEST_F(PingPongBed, BothSidesClosingAtOnceLeaveNoReceiveWaitingForTheDisconnectTimer) {
  expectEveryClientCloses<ClosesAtTheLastMessage>(reactor_, bed_, "that closed at the last, as their peer closed, of");
}

// The same for sends: answers posted after the device flushed the queue pair go into soft-iWARP's
// send queue in user space and never complete either (kv-client on siw took 5.3 s for 10 commands,
// 0.3 s on rxe). They are reported flushed, as after the timer.
TEST_F(PingPongBed, AnswersToAPeerThatClosedTheInstantItHadSentLeaveNoSendWaitingForTheDisconnectTimer) {
  expectEveryClientCloses<AnswersUntilClosed>(reactor_, bed_, "that answered each of a peer's (which closed at once)");
}

}  // namespace
