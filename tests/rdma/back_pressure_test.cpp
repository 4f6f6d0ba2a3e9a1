// Receive-side back-pressure over real RDMA: a reader that pauses (Connection::pauseReceiving)
// stops its peer's sends without losing or reordering a byte, evrdma's own frames (credit returns,
// keepalive) go on meanwhile, a writer refused with -ENOBUFS hears onWritable, and what a paused
// reader holds when its peer closes reaches it before onDisconnected. Also the pattern
// documented before pauseReceiving existed (autoPostRecv off, postRecv() from onRecv), which
// stalled for good once evrdma's own frames had used up receives the application never saw.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/DeviceCounters.h"
#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;
using evrdma::Connection;
using evrdma::ConnectionState;

constexpr size_t kChunk = 64 * 1024;

uint8_t streamByte(uint64_t offset, uint32_t seed) {
  return static_cast<uint8_t>(offset * 7 + seed + (offset >> 13));
}

// One direction's bytes: written in kChunk messages with postSend (waiting for onWritable when it
// returns -ENOBUFS), and checked byte by byte as they arrive.
struct Stream {
  uint32_t seed = 0;
  uint64_t total = 0;
  uint64_t sent = 0;      // bytes postSend accepted
  uint64_t received = 0;  // bytes the other side got, all checked
  uint64_t badBytes = 0;
  int refusedWithNoBuffers = 0;
  int writableAfterRefusal = 0;
};

// A side of the connection: writes its outbound stream, checks the inbound one, and (when told)
// pauses its reading after `pauseEvery` messages until the test resumes it.
struct Side {
  Connection* connection = nullptr;
  bool established = false;
  Stream* out = nullptr;
  Stream* in = nullptr;
  bool writing = false;   // the test started this side's writer (start())
  bool refused = false;   // the last postSend said -ENOBUFS: onWritable must follow
  uint32_t pauseEvery = 0;  // 0: never pauses on its own
  uint32_t sincePause = 0;
  uint32_t pauses = 0;
  bool repostFromOnRecv = false;  // autoPostRecv off: postRecv() inside onRecv
  int postRecvFailures = 0;
  std::string error;
  bool closed = false;
  uint64_t receivedWhenPeerLeft = UINT64_MAX;  // at onDisconnected
};

struct Streamer : evrdma::ConnectionHandler {
  Side& s;
  explicit Streamer(Side& side) : s(side) {}
  void write(Connection& c) {
    static thread_local std::vector<uint8_t> chunk(kChunk);
    while (s.writing && s.out->sent < s.out->total) {
      const size_t length = std::min<uint64_t>(kChunk, s.out->total - s.out->sent);
      for (size_t i = 0; i < length; ++i) chunk[i] = streamByte(s.out->sent + i, s.out->seed);
      const int rc = c.postSend(chunk.data(), length);
      if (rc == -ENOBUFS) {
        ++s.out->refusedWithNoBuffers;
        s.refused = true;
        return;  // onWritable comes once a buffer is free
      }
      if (rc != 0) {
        s.error = std::string("postSend: ") + strerror(-rc);
        return;
      }
      s.out->sent += length;
    }
  }
  void onEstablished(Connection& c) noexcept override {
    s.connection = &c;
    s.established = true;
  }
  void onWritable(Connection& c) noexcept override {
    if (s.refused) ++s.out->writableAfterRefusal;
    s.refused = false;
    write(c);
  }
  void onRecv(Connection& c, const uint8_t* data, size_t length) noexcept override {
    for (size_t i = 0; i < length; ++i)
      if (data[i] != streamByte(s.in->received + i, s.in->seed)) ++s.in->badBytes;
    s.in->received += length;
    if (s.repostFromOnRecv && c.postRecv() != 0) ++s.postRecvFailures;
    if (s.pauseEvery > 0 && ++s.sincePause >= s.pauseEvery && s.in->received < s.in->total) {
      s.sincePause = 0;
      ++s.pauses;
      if (c.pauseReceiving() != 0) s.error = "pauseReceiving failed";
    }
  }
  void onDisconnected(Connection&) noexcept override { s.receivedWhenPeerLeft = s.in->received; }
  void onError(Connection&, int err, const char* op) noexcept override {
    s.error = std::string(op) + ": " + strerror(-err);
  }
  void onClosed(Connection& c) noexcept override {
    s.closed = true;
    if (s.connection == &c) s.connection = nullptr;
  }
};

struct StreamerFactory : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  Side* side = nullptr;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::accept(std::make_unique<Streamer>(*side), options);
  }
};

class BackPressure : public PingPongBed {
 protected:
  void SetUp() override {
    PingPongBed::SetUp();
    options.framed = true;
    options.maxMessageSize = kChunk;
    options.recvDepth = 16;
    options.sendDepth = 16;
    clientToAgent.seed = 1;
    agentToClient.seed = 2;
    client.out = agent.in = &clientToAgent;
    agent.out = client.in = &agentToClient;
  }
  void connect() {
    factory.options = options;
    factory.side = &agent;
    listener = evrdma::Listener::create(reactor_, factory);
    ASSERT_EQ(listener->listen(bed_.ip, 0), 0);
    evrdma::ClientOptions clientOptions;
    static_cast<evrdma::ConnectionOptions&>(clientOptions) = options;
    connection = evrdma::Client::create(reactor_, std::make_unique<Streamer>(client), clientOptions);
    ASSERT_EQ(connection->connect(bed_.ip, listener->port()), 0);
    ASSERT_TRUE(runUntil([&] { return (client.established && agent.established) || !client.error.empty(); }, 30s))
        << client.error << " / agent: " << agent.error;
    rnrBefore = evrdma::readRnrCounters(connection->cmId()->verbs);
  }
  // Starts `side`'s writer.
  void start(Side& side) {
    side.writing = true;
    Streamer(side).write(*side.connection);
  }
  // Where each side stands, for a failure message.
  std::string describe() const {
    std::string out;
    for (const Side* side : {&client, &agent}) {
      const Connection* c = side->connection;
      if (c == nullptr) continue;
      out += std::string("; ") + (side == &client ? "client" : "agent") + ": paused " +
             std::to_string(c->receivingPaused()) + ", holds " + std::to_string(c->receivesHeld()) + ", posted " +
             std::to_string(c->postedRecvs()) + ", credits " + std::to_string(c->sendCredits()) + ", owes " +
             std::to_string(c->creditsOwed()) + ", backlog " + std::to_string(c->sendBacklog()) + ", free buffers " +
             std::to_string(c->freeSendBuffers()) + ", sent " + std::to_string(side->out->sent) + ", sq in flight " +
             std::to_string(c->sendQueueStats().inFlight) + " waiting " + std::to_string(c->sendQueueStats().backlog) +
             ", messages sent " + std::to_string(c->stats().messagesSent) + " received " +
             std::to_string(c->stats().messagesReceived) + ", credit frames " + std::to_string(c->stats().creditFramesSent);
    }
    return out;
  }
  bool bothDone() const {
    return clientToAgent.received == clientToAgent.total && agentToClient.received == agentToClient.total;
  }
  void expectWholeAndHealthy() {
    EXPECT_EQ(clientToAgent.badBytes, 0u);
    EXPECT_EQ(agentToClient.badBytes, 0u);
    EXPECT_EQ(client.error, "");
    EXPECT_EQ(agent.error, "");
    EXPECT_EQ(connection->state(), ConnectionState::Established);
    const evrdma::RnrCounters after = evrdma::readRnrCounters(connection->cmId()->verbs);
    if (after.available) {
      EXPECT_EQ(after.naksReceived, rnrBefore.naksReceived) << "a paused reader never causes RNR";
    }
  }
  void TearDown() override {
    connection.reset();
    listener.reset();
    runUntil([&] { return client.connection == nullptr && agent.connection == nullptr; }, 10s);
    PingPongBed::TearDown();
  }

  evrdma::ConnectionOptions options;
  Stream clientToAgent, agentToClient;
  Side client, agent;
  StreamerFactory factory;
  evrdma::Listener::Ptr listener;
  evrdma::Client::Ptr connection;
  evrdma::RnrCounters rnrBefore;
};

TEST_F(BackPressure, ReadersPausedAndResumedManyTimesStopTheirPeersAndEveryByteArrivesBothWaysAtOnce) {
  const uint64_t total = lightStress() ? (16u << 20) : (64u << 20);
  clientToAgent.total = agentToClient.total = total;
  client.pauseEvery = 5;
  agent.pauseEvery = 7;
  connect();
  // A paused side resumes only once its peer is proven stopped: the peer has sends waiting for
  // credits while this side holds every receive a message may use (recvDepth - 3; three stay for
  // evrdma's own frames). Or once the peer has nothing left to send.
  int stoppedPeers = 0;
  uint32_t mostHeld = 0;
  auto resumeIfPeerStopped = [&](Side& self, Side& peer) {
    Connection* me = self.connection;
    Connection* other = peer.connection;
    if (me == nullptr || other == nullptr || !me->receivingPaused()) return;
    mostHeld = std::max(mostHeld, me->receivesHeld());
    const bool stopped = other->sendBacklog() > 0 && me->receivesHeld() == me->recvDepth() - 3;
    if (stopped) ++stoppedPeers;
    if (stopped || peer.out->sent == peer.out->total) {
      ASSERT_EQ(me->resumeReceiving(), 0);
    }
  };
  evrdma::Timer referee(reactor_, [&] {
    resumeIfPeerStopped(client, agent);
    resumeIfPeerStopped(agent, client);
  });
  referee.startPeriodic(1ms);
  start(client);
  start(agent);
  ASSERT_TRUE(runUntil([&] { return bothDone() || !client.error.empty() || !agent.error.empty(); }, 240s))
      << "client got " << agentToClient.received << ", agent got " << clientToAgent.received << " of " << total
      << "; errors '" << client.error << "' / '" << agent.error << "'" << describe();
  expectWholeAndHealthy();
  EXPECT_LE(mostHeld, options.recvDepth - 3) << "a paused reader holds no receive its protocol frames need";
  EXPECT_GE(stoppedPeers, 20) << "the pauses must really have stopped the peer, many times";
  EXPECT_GE(client.pauses, 20u);
  EXPECT_GE(agent.pauses, 20u);
  EXPECT_GT(clientToAgent.refusedWithNoBuffers + agentToClient.refusedWithNoBuffers, 0)
      << "the writers must have met full send buffers";
  EXPECT_EQ(clientToAgent.writableAfterRefusal, clientToAgent.refusedWithNoBuffers)
      << "every -ENOBUFS is followed by onWritable";
  EXPECT_EQ(agentToClient.writableAfterRefusal, agentToClient.refusedWithNoBuffers);
  std::printf("[ figures  ] %llu MiB each way: %u + %u pauses, the peer proven stopped %d times, at most %u "
              "receives held of %u; credit waits %llu / %llu, credit-only frames %llu / %llu\n",
              static_cast<unsigned long long>(total >> 20), client.pauses, agent.pauses, stoppedPeers, mostHeld,
              options.recvDepth, static_cast<unsigned long long>(connection->stats().creditWaits),
              static_cast<unsigned long long>(agent.connection->stats().creditWaits),
              static_cast<unsigned long long>(connection->stats().creditFramesSent),
              static_cast<unsigned long long>(agent.connection->stats().creditFramesSent));
}

TEST_F(BackPressure, ApplicationsThatRepostFromOnRecvWithAutoPostRecvOffNeverStall) {
  // The pattern documented before pauseReceiving: each onRecv gives its own buffer back. evrdma's
  // hello, credit frames and keepalives consume receives too; the application never sees those.
  const uint64_t total = lightStress() ? (4u << 20) : (16u << 20);
  clientToAgent.total = agentToClient.total = total;
  options.autoPostRecv = false;
  options.keepaliveInterval = 20ms;  // probes and replies consume receives all along
  options.keepaliveTimeout = 60s;
  client.repostFromOnRecv = agent.repostFromOnRecv = true;
  connect();
  start(client);
  start(agent);
  ASSERT_TRUE(runUntil([&] { return bothDone() || !client.error.empty() || !agent.error.empty(); }, 240s))
      << "client got " << agentToClient.received << ", agent got " << clientToAgent.received << " of " << total
      << "; errors '" << client.error << "' / '" << agent.error << "'"
      << describe();
  expectWholeAndHealthy();
  EXPECT_EQ(client.postRecvFailures, 0) << "postRecv() from onRecv gives back the buffer being delivered";
  EXPECT_EQ(agent.postRecvFailures, 0);
  EXPECT_EQ(connection->receivesHeld(), 0u);
  EXPECT_GT(connection->stats().creditFramesSent + agent.connection->stats().creditFramesSent, 0u);
}

TEST_F(BackPressure, ReadersPausedBothWaysKeepTheirConnectionAliveKeepaliveGoesOn) {
  clientToAgent.total = agentToClient.total = 4u << 20;  // far more than a paused reader takes
  options.keepaliveInterval = 50ms;
  options.keepaliveTimeout = 400ms;
  connect();
  ASSERT_EQ(agent.connection->pauseReceiving(), 0);
  ASSERT_EQ(connection->pauseReceiving(), 0);
  start(client);
  start(agent);
  // Both writers are stopped by readers that hold what a message may use: each side hears the
  // other only through keepalive probes and replies, in the receives that stay free for them.
  const uint64_t probesBefore = connection->stats().keepaliveProbesSent + agent.connection->stats().keepaliveProbesSent;
  const uint64_t repliesBefore =
      connection->stats().keepaliveRepliesSent + agent.connection->stats().keepaliveRepliesSent;
  ASSERT_TRUE(runUntil(
      [&] {
        return (connection->stats().keepaliveProbesSent + agent.connection->stats().keepaliveProbesSent >=
                    probesBefore + 40 &&
                connection->stats().keepaliveRepliesSent + agent.connection->stats().keepaliveRepliesSent >=
                    repliesBefore + 40) ||
               !client.error.empty() || !agent.error.empty();
      },
      120s));
  EXPECT_EQ(client.error, "") << "probes must be answered while both readers hold the peer's messages";
  EXPECT_EQ(agent.error, "");
  EXPECT_GT(connection->sendBacklog(), 0u) << "the writers really were stopped all along";
  EXPECT_GT(agent.connection->sendBacklog(), 0u);
  for (const Connection* c : {client.connection, agent.connection}) {
    EXPECT_GE(c->receivesHeld(), 1u);
    EXPECT_LE(c->receivesHeld(), options.recvDepth - 3) << "three receives stay free for evrdma's own frames";
  }
  ASSERT_EQ(agent.connection->resumeReceiving(), 0);
  ASSERT_EQ(connection->resumeReceiving(), 0);
  ASSERT_TRUE(runUntil([&] { return bothDone() || !client.error.empty() || !agent.error.empty(); }, 60s)) << describe();
  expectWholeAndHealthy();
}

TEST_F(BackPressure, PausingOneConnectionLeavesAnotherOnTheSameReactorAndCompletionQueueFlowing) {
  clientToAgent.total = 8u << 20;
  connect();
  // A second pair on the same Reactor (and so on the same shared completion queue).
  Stream otherUp, otherDown;
  otherUp.seed = 3;
  otherUp.total = 8u << 20;
  otherDown.seed = 4;
  Side otherClient, otherAgent;
  otherClient.out = otherAgent.in = &otherUp;
  otherAgent.out = otherClient.in = &otherDown;
  StreamerFactory otherFactory;
  otherFactory.options = options;
  otherFactory.side = &otherAgent;
  evrdma::Listener::Ptr otherListener = evrdma::Listener::create(reactor_, otherFactory);
  ASSERT_EQ(otherListener->listen(bed_.ip, 0), 0);
  evrdma::ClientOptions clientOptions;
  static_cast<evrdma::ConnectionOptions&>(clientOptions) = options;
  evrdma::Client::Ptr other = evrdma::Client::create(reactor_, std::make_unique<Streamer>(otherClient), clientOptions);
  ASSERT_EQ(other->connect(bed_.ip, otherListener->port()), 0);
  ASSERT_TRUE(runUntil([&] { return (otherClient.established && otherAgent.established) || !otherClient.error.empty(); }, 30s))
      << otherClient.error;
  ASSERT_EQ(agent.connection->pauseReceiving(), 0);
  start(client);
  start(otherClient);
  ASSERT_TRUE(runUntil([&] { return otherUp.received == otherUp.total || !otherAgent.error.empty(); }, 120s))
      << "the other connection got " << otherUp.received << " of " << otherUp.total;
  EXPECT_EQ(otherUp.badBytes, 0u);
  EXPECT_EQ(clientToAgent.received, 0u) << "the paused one delivered nothing meanwhile";
  EXPECT_GT(connection->sendBacklog(), 0u) << "and its writer stayed stopped";
  ASSERT_EQ(agent.connection->resumeReceiving(), 0);
  ASSERT_TRUE(runUntil([&] { return clientToAgent.received == clientToAgent.total || !agent.error.empty(); }, 120s))
      << describe();
  expectWholeAndHealthy();
  other.reset();
  otherListener.reset();
  runUntil([&] { return otherClient.connection == nullptr && otherAgent.connection == nullptr; }, 10s);
}

TEST_F(BackPressure, PausingIsRefusedOnceClosingAndResumingDeliversInOrderFromALaterTurn) {
  clientToAgent.total = 40 * kChunk;
  connect();
  ASSERT_EQ(agent.connection->pauseReceiving(), 0);
  start(client);
  // Until the writer is stopped and the last message its credits allowed has landed: the writer
  // knows it is out of credits before the agent's CQ has handed that message out (12 of 13 once
  // under valgrind).
  ASSERT_TRUE(runUntil(
      [&] {
        return (connection->sendBacklog() > 0 && agent.connection->receivesHeld() >= options.recvDepth - 3) ||
               !client.error.empty();
      },
      30s))
      << describe() << "; the agent holds " << agent.connection->receivesHeld();
  EXPECT_EQ(clientToAgent.received, 0u) << "nothing is delivered while paused";
  const uint32_t held = agent.connection->receivesHeld();
  EXPECT_EQ(held, options.recvDepth - 3);
  ASSERT_EQ(agent.connection->resumeReceiving(), 0);
  EXPECT_EQ(clientToAgent.received, 0u) << "resuming delivers from a later turn, not inside the call";
  ASSERT_TRUE(runUntil([&] { return clientToAgent.received == clientToAgent.total; }, 60s));
  expectWholeAndHealthy();
  agent.connection->close();
  EXPECT_EQ(agent.connection->pauseReceiving(), -ENOTCONN);
  EXPECT_EQ(agent.connection->resumeReceiving(), -ENOTCONN);
}

// Messages the peer sent (its sends completed: it was told they arrived) and a paused reader holds
// when the peer closes reach onRecv, in order, before onDisconnected, paused or not: the peer can
// be held back no more, and they were dropped with the receive buffers (a stream over this lost
// the tail of what its peer wrote before it freed its end).
TEST_F(BackPressure, WhatAPausedReaderHoldsReachesItInOrderBeforeOnDisconnectedWhenThePeerCloses) {
  clientToAgent.total = 8 * kChunk;  // within the agent's receives: every send completes
  connect();
  ASSERT_EQ(agent.connection->pauseReceiving(), 0);
  start(client);
  ASSERT_TRUE(runUntil(
      [&] {
        return (agent.connection->receivesHeld() == 8 && connection->sendQueueStats().inFlight == 0) ||
               !client.error.empty();
      },
      30s))
      << describe();
  EXPECT_EQ(clientToAgent.received, 0u) << "nothing is delivered while paused";
  connection->close();
  ASSERT_TRUE(runUntil([&] { return agent.closed; }, 30s)) << describe();
  EXPECT_EQ(agent.receivedWhenPeerLeft, clientToAgent.total) << "held messages were dropped when the peer left";
  EXPECT_EQ(clientToAgent.received, clientToAgent.total);
  EXPECT_EQ(clientToAgent.badBytes, 0u);
  EXPECT_EQ(agent.error, "");
}

}  // namespace
