// The embedding kit over real RDMA: a Reactor's statistics without a live connection, a
// Listener's agents counted and totalled, the log hook, the graceful drain, keepalive and idle
// timeouts, and the reconnecting client's backoff and return. (A peer process stopped with
// SIGSTOP is timed out in tests/rdma/embedded_server_test.py, with real processes.)
#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/http.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <set>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "FiguresHttp.h"
#include "evrdma/Agent.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Log.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReconnectingClient.h"
#include "evrdma/Watch.h"
#include "rdma/EchoPair.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;
using evrdma::test::runUntil;

using evrdma::test::Echo;
using evrdma::test::EchoFactory;
using evrdma::test::framedClient;
using evrdma::test::Sender;

class EmbeddingKit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed));
    ASSERT_TRUE(reactor.valid());
    factory.options.framed = true;
    factory.options.maxMessageSize = 256;
  }
  void listen(const evrdma::ListenerOptions& options = {}) {
    listener = evrdma::Listener::create(reactor, factory, options);
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  }
  evrdma::Client::Ptr connect(Sender*& sender, int count, bool closeWhenDone,
                              const evrdma::ClientOptions& options = framedClient()) {
    auto owned = std::make_unique<Sender>();
    owned->count = count;
    owned->closeWhenDone = closeWhenDone;
    sender = owned.get();
    auto client = evrdma::Client::create(reactor, std::move(owned), options);
    EXPECT_EQ(client->connect(bed.ip, listener->port()), 0);
    return client;
  }

  evrdma::test::TestBed bed;
  evrdma::Reactor reactor;
  EchoFactory factory;
  evrdma::Listener::Ptr listener;
};

TEST_F(EmbeddingKit, AReactorsSnapshotCountsConnectionsByStateAndKeepsDeviceFiguresAfterTheyClose) {
  listen();
  Sender* a = nullptr;
  Sender* b = nullptr;
  auto clientA = connect(a, 50, false);
  auto clientB = connect(b, 50, false);
  ASSERT_TRUE(runUntil(reactor, [&] { return a->echoed == 50 && b->echoed == 50; }, 20s));
  evrdma::ReactorStats during = reactor.stats();
  EXPECT_EQ(during.connections[evrdma::ConnectionState::Established], 4u) << "2 clients and their 2 agents";
  ASSERT_EQ(during.devices.size(), 1u);
  EXPECT_EQ(during.devices[0].device, bed.device);
  clientA.reset();
  clientB.reset();
  listener.reset();
  ASSERT_TRUE(runUntil(reactor, [&] { return reactor.stats().connections.total() == 0; }, 20s));
  const evrdma::ReactorStats after = reactor.stats();
  ASSERT_EQ(after.devices.size(), 1u);
  const evrdma::CompletionStats& cq = after.devices[0].completions;
  // 200 messages each way were sent and received: at least that many completions.
  EXPECT_GE(cq.completions, 400u);
  EXPECT_GE(cq.polls, cq.events);
  uint64_t histogram = 0;
  for (uint64_t polls : cq.perPoll) histogram += polls;
  EXPECT_EQ(histogram, cq.polls);
  EXPECT_GT(after.cmEvents.dispatched, 0u);
}

TEST_F(EmbeddingKit, AListenersAgentsAreIterableCountedByStateAndTotalledAfterTheyClose) {
  listen();
  std::vector<Sender*> senders(3);
  std::vector<evrdma::Client::Ptr> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(connect(senders[i], 10 * (i + 1), false));
  ASSERT_TRUE(runUntil(reactor, [&] {
    return senders[0]->echoed == 10 && senders[1]->echoed == 20 && senders[2]->echoed == 30;
  }, 20s));
  EXPECT_EQ(listener->agentsByState()[evrdma::ConnectionState::Established], 3u);
  std::vector<uint64_t> received;
  listener->forEachAgent([&](evrdma::Agent& agent) { received.push_back(agent.stats().messagesReceived); });
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, (std::vector<uint64_t>{10, 20, 30}));
  clients[0].reset();  // one closes; its figures stay in the totals
  ASSERT_TRUE(runUntil(reactor, [&] { return listener->agentCount() == 2; }, 20s));
  const evrdma::ConnectionStats totals = listener->agentTotals();
  EXPECT_EQ(totals.messagesReceived, 60u);
  EXPECT_EQ(totals.messagesSent, 60u);
  EXPECT_EQ(totals.bytesReceived, 240u);
  EXPECT_EQ(listener->stats().agentsClosed, 1u);
  EXPECT_EQ(listener->agentsByState().total(), 2u);
}

TEST_F(EmbeddingKit, AWalkInSlicesVisitsEveryAgentPresentThroughoutOnceWhileOthersComeAndGo) {
  listen();
  // Each client sends its own number of messages: its agent's messagesReceived names it.
  constexpr int kClients = 6;
  std::vector<Sender*> senders(kClients + 1);
  std::vector<evrdma::Client::Ptr> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect(senders[i], i + 1, false));
  ASSERT_TRUE(runUntil(reactor, [&] {
    for (int i = 0; i < kClients; ++i)
      if (senders[i]->echoed != i + 1) return false;
    return listener->agentCount() == kClients;
  }, 20s));
  std::map<uint64_t, int> visits;  // by messagesReceived
  const auto visit = [&](evrdma::Agent& agent) { ++visits[agent.stats().messagesReceived]; };

  evrdma::AgentWalk walk;
  EXPECT_EQ(listener->forEachAgentFrom(walk, 0, visit), 0u);
  EXPECT_FALSE(walk.done) << "a walk that took nothing yet has every agent ahead of it";
  ASSERT_EQ(listener->forEachAgentFrom(walk, 2, visit), 2u);
  EXPECT_FALSE(walk.done);
  // Between slices one agent not yet visited goes, and a new one comes.
  int gone = -1;
  for (int i = 0; i < kClients && gone < 0; ++i)
    if (visits.count(static_cast<uint64_t>(i + 1)) == 0) gone = i;
  ASSERT_GE(gone, 0);
  clients[static_cast<size_t>(gone)].reset();
  clients.push_back(connect(senders[kClients], kClients + 1, false));
  ASSERT_TRUE(runUntil(reactor, [&] {
    return senders[kClients]->echoed == kClients + 1 && listener->agentCount() == kClients;
  }, 20s));
  size_t slices = 1;
  while (!walk.done) {
    ASSERT_LE(listener->forEachAgentFrom(walk, 2, visit), 2u);
    ASSERT_LT(++slices, 10u) << "the walk does not end";
  }
  for (int i = 0; i < kClients; ++i) {
    const uint64_t name = static_cast<uint64_t>(i + 1);
    if (i == gone)
      EXPECT_EQ(visits.count(name), 0u) << "the agent that went before the walk reached it";
    else
      EXPECT_EQ(visits[name], 1) << "agent " << name << " was there throughout: visited exactly once";
  }
  EXPECT_LE(visits[kClients + 1], 1) << "the agent that came during the walk: at most once";
  EXPECT_EQ(listener->forEachAgentFrom(walk, 2, visit), 0u) << "a finished walk visits nothing more";
  EXPECT_TRUE(walk.done);
  // A new walk sees them all again.
  visits.clear();
  evrdma::AgentWalk again;
  while (!again.done) listener->forEachAgentFrom(again, 4, visit);
  EXPECT_EQ(visits.size(), static_cast<size_t>(kClients));
}

namespace {
// GET `path` from 127.0.0.1:`port` with blocking calls (run it on a thread of its own): the whole
// response, as read until the server closed.
std::string httpGet(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return response;
}

// The body of a chunked HTTP response, and how many chunks carried it (-1: not chunked).
std::string dechunked(const std::string& response, int& chunks) {
  chunks = -1;
  const size_t bodyAt = response.find("\r\n\r\n");
  if (bodyAt == std::string::npos || response.find("Transfer-Encoding: chunked") > bodyAt) return "";
  std::string body;
  chunks = 0;
  for (size_t at = bodyAt + 4;;) {
    const size_t lineEnd = response.find("\r\n", at);
    if (lineEnd == std::string::npos) return body;
    const size_t length = std::stoul(response.substr(at, lineEnd - at), nullptr, 16);
    if (length == 0) return body;
    body += response.substr(lineEnd + 2, length);
    ++chunks;
    at = lineEnd + 2 + length + 2;
  }
}
}  // namespace

TEST_F(EmbeddingKit, AListingOfTheAgentsOverHttpGoesOutASliceAtATimeEachAgentOnce) {
  listen();
  constexpr int kClients = 6;
  std::vector<Sender*> senders(kClients);
  std::vector<evrdma::Client::Ptr> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect(senders[i], i + 1, false));
  ASSERT_TRUE(runUntil(reactor, [&] {
    for (int i = 0; i < kClients; ++i)
      if (senders[i]->echoed != i + 1) return false;
    return true;
  }, 20s));
  // The demo servers' /agents, two agents a slice, on an evhttp of the application's.
  struct Served {
    const evrdma::Listener* listener;
  } served{listener.get()};
  std::unique_ptr<evhttp, void (*)(evhttp*)> http(evhttp_new(reactor.base()), evhttp_free);
  evhttp_bound_socket* bound = evhttp_bind_socket_with_handle(http.get(), "127.0.0.1", 0);
  ASSERT_NE(bound, nullptr);
  evhttp_set_gencb(http.get(), [](evhttp_request* request, void* arg) {
    embedded::replyAgents(request, *static_cast<Served*>(arg)->listener, 2);
  }, &served);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  ASSERT_EQ(getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&local), &length), 0);
  std::string response;
  std::atomic<bool> done{false};
  std::thread client([&] {
    response = httpGet(ntohs(local.sin_port), "/agents");
    done = true;
  });
  const bool answered = runUntil(reactor, [&] { return done.load(); }, 20s);
  client.join();
  ASSERT_TRUE(answered);
  int chunks = 0;
  const std::string body = dechunked(response, chunks);
  EXPECT_GE(chunks, kClients / 2) << "one chunk a slice of two agents:\n" << response;
  std::map<std::string, int> listed;  // by messages_received
  const std::regex received("\"messages_received\": ([0-9]+)");
  for (std::sregex_iterator it(body.begin(), body.end(), received), end; it != end; ++it) ++listed[(*it)[1]];
  for (int i = 1; i <= kClients; ++i) EXPECT_EQ(listed[std::to_string(i)], 1) << "agent " << i << " in\n" << body;
  ASSERT_GE(body.size(), 4u);
  EXPECT_EQ(body.front(), '[');
  EXPECT_EQ(body.substr(body.size() - 3), "\n]\n") << "a whole JSON array";
}

TEST_F(EmbeddingKit, AMetricsScrapeWalksTheAgentsAStepATurnAndAnswersAfterAnEarlierClientLeftMidScrape) {
  listen();
  constexpr int kClients = 6;
  std::vector<Sender*> senders(kClients);
  std::vector<evrdma::Client::Ptr> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect(senders[i], 2, false));
  ASSERT_TRUE(runUntil(reactor, [&] {
    for (Sender* sender : senders)
      if (sender->echoed != 2) return false;
    return true;
  }, 20s));
  // The demo servers' /metrics, the backlogs summed one agent a turn.
  struct Served {
    evrdma::Reactor* reactor;
    const evrdma::Listener* listener;
    uint64_t turns = 0;  // the loop's turns (a timer of 0 ms that fires once a turn)
    std::vector<uint64_t> tookTurns;  // per scrape: the turns from its request to its last byte out
  } served{&reactor, listener.get(), 0, {}};
  // (Not EV_PERSIST: libevent does not add a persistent timer of 0 again.)
  struct TurnCounter {
    event* self = nullptr;
    uint64_t* turns = nullptr;
  } counter{nullptr, &served.turns};
  std::unique_ptr<event, void (*)(event*)> turn(
      event_new(reactor.base(), -1, 0,
                [](evutil_socket_t, short, void* arg) {
                  auto& c = *static_cast<TurnCounter*>(arg);
                  ++*c.turns;
                  const timeval nextTurn{0, 0};
                  event_add(c.self, &nextTurn);
                },
                &counter),
      event_free);
  counter.self = turn.get();
  const timeval everyTurn{0, 0};
  ASSERT_EQ(event_add(turn.get(), &everyTurn), 0);
  std::unique_ptr<evhttp, void (*)(evhttp*)> http(evhttp_new(reactor.base()), evhttp_free);
  evhttp_bound_socket* bound = evhttp_bind_socket_with_handle(http.get(), "127.0.0.1", 0);
  ASSERT_NE(bound, nullptr);
  evhttp_set_gencb(http.get(), [](evhttp_request* request, void* arg) {
    auto& s = *static_cast<Served*>(arg);
    s.tookTurns.push_back(s.turns);
    evhttp_request_set_on_complete_cb(request, [](evhttp_request*, void* whose) {
      auto& scraped = *static_cast<Served*>(whose);
      scraped.tookTurns.back() = scraped.turns - scraped.tookTurns.back();
    }, &s);
    embedded::replyMetrics(request, *s.reactor, *s.listener, "kit", embedded::AppFigures{}, 1);
  }, &served);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  ASSERT_EQ(getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&local), &length), 0);
  const uint16_t port = ntohs(local.sin_port);
  // A client that asks and leaves at once, then one that reads the answer.
  std::string response;
  std::atomic<bool> done{false};
  std::thread client([&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to = local;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
      const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
    response = httpGet(port, "/metrics");
    done = true;
  });
  const bool answered = runUntil(reactor, [&] { return done.load(); }, 20s);
  client.join();
  ASSERT_TRUE(answered);
  EXPECT_NE(response.find("HTTP/1.1 200"), std::string::npos) << response;
  EXPECT_NE(response.find("evrdma_listener_agents{listener=\"kit\",state=\"Established\"} 6\n"), std::string::npos)
      << response;
  EXPECT_NE(response.find("evrdma_listener_send_backlog{listener=\"kit\"} 0\n"), std::string::npos) << response;
  ASSERT_FALSE(served.tookTurns.empty());
  EXPECT_GE(served.tookTurns.back(), static_cast<uint64_t>(kClients) - 1)
      << "one agent a step, a turn each: the answer took " << served.tookTurns.back() << " turns";
}

TEST_F(EmbeddingKit, CountsByStateAgreeWithEveryConnectionsOwnStateAtEveryTurnWhileTheyConnectRunAndClose) {
  // The counts are kept by each connection as its state moves (no walk): checked against a walk at
  // every turn of the loop, clients and agents together for the Reactor's, agents for the Listener's.
  listen();
  std::vector<Sender*> senders;
  std::vector<evrdma::Client::Ptr> clients;
  std::set<evrdma::ConnectionState> seen;
  std::string disagreement;
  const auto agree = [&] {
    evrdma::ConnectionCounts agents, all;
    listener->forEachAgent([&](evrdma::Agent& agent) { ++agents[agent.state()]; });
    all = agents;
    for (const auto& client : clients) ++all[client->state()];
    for (size_t i = 0; i < all.byState.size(); ++i)
      if (all.byState[i] > 0) seen.insert(static_cast<evrdma::ConnectionState>(i));
    const evrdma::ConnectionCounts kept = listener->agentsByState(), keptAll = reactor.stats().connections;
    for (size_t i = 0; i < all.byState.size() && disagreement.empty(); ++i) {
      const char* state = evrdma::toString(static_cast<evrdma::ConnectionState>(i));
      if (kept.byState[i] != agents.byState[i])
        disagreement = std::string("the Listener counts ") + std::to_string(kept.byState[i]) + " agents " + state +
                       ", a walk " + std::to_string(agents.byState[i]);
      else if (keptAll.byState[i] != all.byState[i])
        disagreement = std::string("the Reactor counts ") + std::to_string(keptAll.byState[i]) + " " + state +
                       ", a walk " + std::to_string(all.byState[i]);
    }
    return disagreement.empty();
  };
  const auto spin = [&](const std::function<bool()>& done) {
    return evrdma::test::spinUntil({&reactor}, 30s, [&] { return !agree() || done(); }) && disagreement.empty();
  };
  const auto open = [&](int count, bool closeWhenDone) {
    senders.push_back(nullptr);
    clients.push_back(connect(senders.back(), count, closeWhenDone));
  };
  // Four that close once their echoes are back, two that stay.
  for (int i = 0; i < 4; ++i) open(5 + i, true);
  for (int i = 0; i < 2; ++i) open(3, false);
  ASSERT_TRUE(spin([&] {
    return senders[0]->closed && senders[1]->closed && senders[2]->closed && senders[3]->closed &&
           senders[4]->echoed == 3 && senders[5]->echoed == 3 && listener->agentCount() == 2;
  })) << disagreement;
  // One rejected: its client fails.
  factory.rejectWith = "not now";
  open(1, true);
  ASSERT_TRUE(spin([&] { return senders[6]->closed; })) << disagreement;
  factory.rejectWith.clear();
  // One refused (nobody listens on its port any more): its client fails.
  evrdma::Listener::Ptr gone = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(gone->listen(bed.ip, 0), 0);
  const uint16_t refusingPort = gone->port();
  gone.reset();
  senders.push_back(nullptr);
  {
    auto owned = std::make_unique<Sender>();
    senders.back() = owned.get();
    clients.push_back(evrdma::Client::create(reactor, std::move(owned), framedClient()));
    ASSERT_EQ(clients.back()->connect(bed.ip, refusingPort), 0);
  }
  ASSERT_TRUE(spin([&] { return senders[7]->closed; })) << disagreement;
  EXPECT_EQ(clients[7]->state(), evrdma::ConnectionState::Failed) << "refused: " << senders[7]->op;
  // The two that stayed close from the client's side, then every client is freed.
  clients[4]->close();
  clients[5]->close();
  ASSERT_TRUE(spin([&] { return senders[4]->closed && senders[5]->closed && listener->agentCount() == 0; }))
      << disagreement;
  clients.clear();  // freed on a later turn: the walk has no list of them to compare with
  ASSERT_TRUE(runUntil(reactor, [&] { return reactor.stats().connections.total() == 0; }, 20s))
      << "the Reactor still counts " << reactor.stats().connections.total() << " connections";
  for (evrdma::ConnectionState state : {evrdma::ConnectionState::Established, evrdma::ConnectionState::Closed,
                                        evrdma::ConnectionState::Failed})
    EXPECT_EQ(seen.count(state), 1u) << "never saw a connection " << evrdma::toString(state);  // the others pass within a turn or two
}

TEST_F(EmbeddingKit, TheLogCallbackHearsARejectedRequestWithItsReasonAtInfoButNotAtWarn) {
  std::vector<std::string> info, warn;
  factory.rejectWith = "no thanks, not today";
  listen();
  for (auto* heard : {&info, &warn}) {
    evrdma::setLogCallback(heard == &info ? evrdma::LogLevel::Info : evrdma::LogLevel::Warn,
                           [heard](evrdma::LogLevel, const char* message) { heard->emplace_back(message); });
    Sender* sender = nullptr;
    auto client = connect(sender, 1, true);
    ASSERT_TRUE(runUntil(reactor, [&] { return sender->closed; }, 20s));
  }
  evrdma::setLogCallback(evrdma::LogLevel::Off, nullptr);
  bool named = false;
  for (const std::string& m : info) named = named || m.find("no thanks, not today") != std::string::npos;
  EXPECT_TRUE(named) << "the Info log names the reject reason";
  for (const std::string& m : warn) EXPECT_EQ(m.find("no thanks"), std::string::npos) << m;
}

TEST_F(EmbeddingKit, ADrainStopsAcceptingLetsAgentsFinishWithinTheGraceAndReportsTheLastClose) {
  listen();
  Sender* slow = nullptr;
  auto client = connect(slow, 1000000, false);
  ASSERT_TRUE(runUntil(reactor, [&] { return slow->echoed > 10; }, 20s));
  bool drained = false;
  listener->drain(10s, [&] { drained = true; });
  EXPECT_TRUE(listener->draining());
  const int before = slow->echoed;
  ASSERT_TRUE(runUntil(reactor, [&] { return slow->echoed > before + 50; }, 20s)) << "the agent goes on";
  EXPECT_FALSE(drained);
  Sender* refused = nullptr;
  auto refusedClient = connect(refused, 1, true);
  ASSERT_TRUE(runUntil(reactor, [&] { return refused->closed; }, 20s));
  EXPECT_FALSE(refused->established) << "no new connection while draining";
  client.reset();  // the client finishes on its own, well within the grace
  ASSERT_TRUE(runUntil(reactor, [&] { return drained; }, 9s)) << "drained once the last agent closed";
  EXPECT_EQ(listener->agentCount(), 0u);
}

TEST_F(EmbeddingKit, AgentsStillOpenWhenTheGraceRunsOutAreClosedAndThenTheDrainEnds) {
  listen();
  Sender* endless = nullptr;
  auto client = connect(endless, 1000000, false);
  ASSERT_TRUE(runUntil(reactor, [&] { return endless->echoed > 10; }, 20s));
  bool drained = false;
  const auto start = std::chrono::steady_clock::now();
  listener->drain(300ms, [&] { drained = true; });
  ASSERT_TRUE(runUntil(reactor, [&] { return drained; }, 20s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_TRUE(endless->closed || client->state() == evrdma::ConnectionState::Disconnecting ||
              client->state() == evrdma::ConnectionState::Closed)
      << "the server closed it: " << evrdma::toString(client->state());
  EXPECT_EQ(listener->stats().agentsClosed, 1u);
}

TEST_F(EmbeddingKit, AnIdleTimeoutEndsAConnectionThatMovesNothingAndSparesOneThatMoves) {
  factory.options.idleTimeout = 300ms;
  listen();
  Sender* idle = nullptr;
  Sender* busy = nullptr;
  auto idleClient = connect(idle, 1, false);
  auto busyClient = connect(busy, 1000000, false);
  ASSERT_TRUE(runUntil(reactor, [&] { return idle->closed; }, 20s));
  EXPECT_EQ(factory.lastAgentError, -ETIMEDOUT);
  EXPECT_NE(factory.lastAgentOp.find("idle timeout"), std::string::npos) << factory.lastAgentOp;
  EXPECT_FALSE(busy->closed) << "the busy one is untouched";
  EXPECT_EQ(busyClient->state(), evrdma::ConnectionState::Established);
}

TEST_F(EmbeddingKit, KeepaliveProbesOfAnIdlePeerAreAnsweredSoTheConnectionStays) {
  factory.options.keepaliveInterval = 100ms;
  factory.options.keepaliveTimeout = 300ms;
  listen();
  Sender* quiet = nullptr;
  auto client = connect(quiet, 1, false);  // one message, then silence from its application
  ASSERT_TRUE(runUntil(reactor, [&] { return quiet->echoed == 1; }, 20s));
  evrdma::Timer wait(reactor, [&] { reactor.stop(); });
  wait.startOnce(1500ms);  // five keepalive timeouts
  reactor.run();
  uint64_t probes = 0;
  listener->forEachAgent([&](evrdma::Agent& agent) {
    probes = agent.stats().keepaliveProbesSent;
    EXPECT_EQ(agent.state(), evrdma::ConnectionState::Established);
  });
  EXPECT_GE(probes, 3u) << "a probe each time the peer was silent for 100 ms";
  // Every probe answered, but for one that may be on its way when the loop stops.
  const uint64_t replies = client->stats().keepaliveRepliesSent;
  EXPECT_LE(replies, probes);
  EXPECT_GE(replies + 1, probes);
  EXPECT_EQ(client->state(), evrdma::ConnectionState::Established);
  EXPECT_FALSE(quiet->closed);
}

TEST_F(EmbeddingKit, AReconnectingClientBacksOffDoublingAfterEachRefusalAndGivesUpAfterMaxAttempts) {
  listen();
  const uint16_t port = listener->port();
  listener.reset();  // nobody listens there now
  evrdma::ReconnectOptions backoff;
  backoff.initialDelay = 50ms;
  backoff.maxDelay = 150ms;
  backoff.jitter = 0;
  backoff.maxAttempts = 4;
  evrdma::ReconnectingClient client(reactor, [] { return std::make_unique<Sender>(); }, framedClient(), backoff);
  std::vector<long> delays;
  int gaveUp = 1;
  client.onRetry = [&](int err, std::chrono::milliseconds delay) {
    EXPECT_EQ(err, -ECONNREFUSED);
    delays.push_back(static_cast<long>(delay.count()));
  };
  client.onGiveUp = [&](int err) { gaveUp = err; };
  ASSERT_EQ(client.start(bed.ip, port), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return gaveUp != 1; }, 20s));
  EXPECT_EQ(delays, (std::vector<long>{50, 100, 150})) << "doubling, capped";
  EXPECT_EQ(gaveUp, -ECONNREFUSED);
  EXPECT_EQ(client.attempts(), 4u);
  EXPECT_TRUE(client.stopped());
}

TEST_F(EmbeddingKit, AReconnectingClientComesBackToAListenerThatReturnsOnTheSamePort) {
  listen();
  const uint16_t port = listener->port();
  int echoes = 0;
  struct Counting : Sender {
    int* total;
    explicit Counting(int* t) : total(t) { count = 1000000; closeWhenDone = false; }
    void onRecv(evrdma::Connection& c, const uint8_t* d, size_t n) noexcept override {
      ++*total;
      Sender::onRecv(c, d, n);
    }
  };
  evrdma::ReconnectOptions backoff;
  backoff.initialDelay = 20ms;
  backoff.maxDelay = 200ms;
  evrdma::ReconnectingClient client(reactor, [&] { return std::make_unique<Counting>(&echoes); }, framedClient(),
                                    backoff);
  ASSERT_EQ(client.start(bed.ip, port), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return echoes > 20; }, 20s));
  listener.reset();  // the server goes: its agent closes, the client's connection ends
  ASSERT_TRUE(runUntil(reactor, [&] { return client.client() == nullptr; }, 20s));
  evrdma::Timer away(reactor, [&] { reactor.stop(); });
  away.startOnce(500ms);
  reactor.run();
  EXPECT_GE(client.attempts(), 2u) << "it kept trying while nobody listened";
  listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(bed.ip, port), 0);
  const int before = echoes;
  ASSERT_TRUE(runUntil(reactor, [&] { return echoes > before + 20; }, 20s)) << "back, and moving messages";
  EXPECT_EQ(client.connections(), 2u);
  client.stop();
  ASSERT_TRUE(runUntil(reactor, [&] { return listener->agentCount() == 0; }, 20s));
}

}  // namespace
