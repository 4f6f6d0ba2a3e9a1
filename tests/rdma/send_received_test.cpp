// Connection::sendReceived over real RDMA: an echo that sends each message it received from the
// message's own receive buffer, without a copy. The buffer is exchanged for a spare
// (spareRecvBuffers), so the receive is posted again at once and the peer's credits flow while the
// echo waits; the buffer is reused only once its send completed; and what cannot be sent so is
// refused before anything is posted.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;
using evrdma::Connection;

constexpr size_t kMessage = 4096;

// Message `index`: every byte says which message it is (and where in it).
std::vector<uint8_t> messageBytes(uint32_t index, size_t length) {
  std::vector<uint8_t> bytes(length);
  for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<uint8_t>(index * 31 + i * 7 + (i >> 8));
  return bytes;
}

// The echoing side: each message goes back with sendReceived, or copied with postSend when no
// spare buffer is free (-ENOBUFS).
struct Forwarder : evrdma::ConnectionHandler {
  Connection* connection = nullptr;
  static constexpr uint64_t kForwardTag = uint64_t{1} << 63;
  uint64_t received = 0, forwarded = 0, copied = 0, sendsDone = 0, forwardsDone = 0;
  int lastRefusal = 0;
  std::string error;
  bool* closed = nullptr;  // outlives the handler, which goes with its agent once closed
  void onEstablished(Connection& c) noexcept override { connection = &c; }
  void onRecv(Connection& c, const uint8_t* data, size_t length) noexcept override {
    ++received;
    int rc = c.sendReceived(received | kForwardTag);
    if (rc == 0) {
      ++forwarded;
      if (c.sendReceived(received) != -EINVAL) error = "a message was sent twice from its buffer";
      return;
    }
    lastRefusal = rc;
    if (rc != -ENOBUFS) {
      error = std::string("sendReceived: ") + strerror(-rc);
      return;
    }
    rc = c.postSend(data, length, received);
    if (rc != 0) error = std::string("postSend: ") + strerror(-rc);
    ++copied;
  }
  void onSendDone(Connection&, uint64_t tag) noexcept override {
    ++sendsDone;
    if ((tag & kForwardTag) != 0) ++forwardsDone;
  }
  void onError(Connection&, int err, const char* op) noexcept override { error = std::string(op) + ": " + strerror(-err); }
  void onClosed(Connection& c) noexcept override {
    if (closed != nullptr) *closed = true;
    if (connection == &c) connection = nullptr;
  }
};

struct ForwarderFactory : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  Forwarder* forwarder = nullptr;
  bool forwarderClosed = false;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    auto handler = std::make_unique<Forwarder>();
    forwarder = handler.get();
    forwarder->closed = &forwarderClosed;
    return evrdma::AcceptDecision::accept(std::move(handler), options);
  }
};

// The sending side: message i carries messageBytes(i); each echo is checked against what was sent.
struct Sender : evrdma::ConnectionHandler {
  Connection* connection = nullptr;
  uint32_t sent = 0, echoes = 0, badEchoes = 0;
  uint32_t toSend = 0;
  std::string error;
  void onEstablished(Connection& c) noexcept override { connection = &c; }
  void sendUpTo(uint32_t total) {
    toSend = total;
    onWritable(*connection);
  }
  void onWritable(Connection& c) noexcept override {
    while (sent < toSend) {
      const std::vector<uint8_t> bytes = messageBytes(sent, kMessage);
      const int rc = c.postSend(bytes.data(), bytes.size());
      if (rc == -ENOBUFS) return;
      if (rc != 0) {
        error = std::string("postSend: ") + strerror(-rc);
        return;
      }
      ++sent;
    }
  }
  void onRecv(Connection&, const uint8_t* data, size_t length) noexcept override {
    if (length != kMessage || std::memcmp(data, messageBytes(echoes, kMessage).data(), kMessage) != 0) ++badEchoes;
    ++echoes;
  }
  void onError(Connection&, int err, const char* op) noexcept override { error = std::string(op) + ": " + strerror(-err); }
  void onClosed(Connection& c) noexcept override {
    if (connection == &c) connection = nullptr;
  }
};

class SendReceived : public PingPongBed {
 protected:
  // kMessage-byte messages, framed or not; the rest as the test sets it.
  static evrdma::ConnectionOptions messagesOf(bool framed) {
    evrdma::ConnectionOptions options;
    options.framed = framed;
    options.maxMessageSize = kMessage;
    return options;
  }
  void connect(evrdma::ConnectionOptions options, uint32_t spares) {
    factory.options = options;
    factory.options.spareRecvBuffers = spares;
    auto handler = std::make_unique<Sender>();
    sender = handler.get();
    evrdma::ClientOptions clientOptions;
    static_cast<evrdma::ConnectionOptions&>(clientOptions) = options;
    pair = listenAndConnect(factory, std::move(handler), clientOptions);
    ASSERT_TRUE(runUntil([&] {
      return (sender->connection != nullptr && factory.forwarder != nullptr && factory.forwarder->connection != nullptr) ||
             !sender->error.empty();
    }, 30s)) << sender->error;
    ASSERT_EQ(sender->error, "");
    forwarder = factory.forwarder;
  }
  void TearDown() override {
    pair = {};
    PingPongBed::TearDown();
  }
  bool failed() const { return !sender->error.empty() || !forwarder->error.empty(); }
  // Round trips one at a time: each message after the previous one's echo came back, up to `last`
  // (of `who`, the fixture's sender unless another is named).
  void oneAtATimeUpTo(uint32_t last) { oneAtATimeUpTo(*sender, last); }
  void oneAtATimeUpTo(Sender& who, uint32_t last) {
    for (uint32_t i = who.sent + 1; i <= last; ++i) {
      who.sendUpTo(i);
      ASSERT_TRUE(runUntil([&] { return who.echoes == i || !who.error.empty() || failed(); }, 30s))
          << "echo " << i << ": " << who.error << " / " << sender->error << " / " << forwarder->error;
    }
  }

  ForwarderFactory factory;
  Pair pair;
  Sender* sender = nullptr;
  Forwarder* forwarder = nullptr;
};

TEST_F(SendReceived, AForwardedBufferIsReusedOnlyAfterItsSendCompletesAndItsReceiveReturnsItsCreditAtOnce) {
  evrdma::ConnectionOptions options = messagesOf(true);
  options.recvDepth = 8;
  options.sendDepth = 32;
  constexpr uint32_t kSpares = 4;
  connect(options, kSpares);
  // The sender stops reading: the echoes use up its credits (recvDepth - 3), then wait in the
  // forwarder's backlog, each holding the buffer it is sent from. Were a buffer reposted before its
  // send completed, a later message would land in it and its echo would carry the wrong bytes.
  ASSERT_EQ(sender->connection->pauseReceiving(), 0);
  constexpr uint32_t kHeldBack = 24;  // more than the forwarder's recvDepth and spares together
  sender->sendUpTo(kHeldBack);
  ASSERT_TRUE(runUntil([&] { return forwarder->received == kHeldBack || failed(); }, 60s))
      << "the forwarder got " << forwarder->received << " of " << kHeldBack << " while its echoes waited: "
      << sender->error << " / " << forwarder->error;
  // Every message arrived although its echoes could not leave: a forwarded receive was posted
  // again at once, with a spare, and its credit went back to the sender.
  EXPECT_GT(forwarder->connection->sendBacklog(), 0u) << "the echoes must have been held back";
  // The first echoes went out on the credits the sender had granted, and their buffers came back;
  // then every spare stayed with a forward that could not leave, and the rest were copied.
  EXPECT_LE(forwarder->sendsDone, options.recvDepth - 3);
  EXPECT_EQ(forwarder->forwarded - forwarder->forwardsDone, kSpares) << "one forward waiting per spare buffer";
  EXPECT_EQ(forwarder->forwarded + forwarder->copied, kHeldBack);
  EXPECT_EQ(forwarder->lastRefusal, -ENOBUFS);
  const uint64_t forwardedHeldBack = forwarder->forwarded, copiedHeldBack = forwarder->copied;
  ASSERT_EQ(sender->connection->resumeReceiving(), 0);
  ASSERT_TRUE(runUntil([&] { return sender->echoes == kHeldBack || failed(); }, 60s)) << sender->echoes;
  EXPECT_EQ(sender->badEchoes, 0u) << "an echo carried bytes that were not its message's";
  // Round trips one at a time: each buffer came back as a spare when its send completed, so
  // every echo is a forward now.
  constexpr uint32_t kRoundTrips = 50;
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(kHeldBack + kRoundTrips));
  EXPECT_EQ(sender->badEchoes, 0u);
  EXPECT_EQ(forwarder->forwarded, forwardedHeldBack + kRoundTrips) << "the spares came back once their sends completed";
  EXPECT_EQ(forwarder->copied, copiedHeldBack);
  ASSERT_TRUE(runUntil([&] { return forwarder->sendsDone == kHeldBack + kRoundTrips || failed(); }, 30s));
  EXPECT_EQ(forwarder->error, "");
  EXPECT_EQ(sender->error, "");
  EXPECT_EQ(forwarder->connection->stats().messagesSent, kHeldBack + kRoundTrips);
  EXPECT_EQ(forwarder->connection->stats().bytesSent, uint64_t{kHeldBack + kRoundTrips} * kMessage)
      << "a forward counts its payload, not the frame header";
}

TEST_F(SendReceived, AnUnframedEchoForwardsEveryMessageAndClosesWithForwardsInFlight) {
  evrdma::ConnectionOptions options = messagesOf(false);
  options.recvDepth = 4;
  options.sendDepth = 4;
  // Two messages in flight; an echo's send completes a round trip before the next pair but one
  // arrives, so four spares are always enough.
  connect(options, 4);
  constexpr uint32_t kMessages = 200;
  uint32_t target = 0;
  while (target < kMessages) {
    target = std::min(kMessages, target + 2);
    sender->sendUpTo(target);
    ASSERT_TRUE(runUntil([&] { return sender->echoes == target || failed(); }, 30s)) << target;
  }
  EXPECT_EQ(sender->badEchoes, 0u);
  EXPECT_EQ(forwarder->copied, 0u);
  EXPECT_EQ(forwarder->forwarded, kMessages);
  // The forwarder closes while echoes are still on their way: their buffers go with the
  // connection (ASan and valgrind watch), no onSendDone after onClosed.
  sender->sendUpTo(kMessages + 2);
  ASSERT_TRUE(runUntil([&] { return forwarder->received == kMessages + 2 || failed(); }, 30s));
  forwarder->connection->close();
  // Not forwarder->closed: the handler is freed with its agent, possibly before the check runs.
  ASSERT_TRUE(runUntil([&] { return factory.forwarderClosed; }, 30s));
}

TEST_F(SendReceived, WhatCannotBeSentFromItsBufferIsRefusedBeforeAnythingIsPosted) {
  connect(messagesOf(true), 0);  // no spare buffers: every forward is refused, the copy goes instead
  EXPECT_EQ(forwarder->connection->sendReceived(), -EINVAL) << "outside onRecv";
  sender->sendUpTo(3);
  ASSERT_TRUE(runUntil([&] { return sender->echoes == 3 || failed(); }, 30s));
  EXPECT_EQ(forwarder->lastRefusal, -ENOBUFS);
  EXPECT_EQ(forwarder->forwarded, 0u);
  EXPECT_EQ(forwarder->copied, 3u);
  EXPECT_EQ(sender->badEchoes, 0u);
  EXPECT_EQ(forwarder->connection->sendReceived(), -EINVAL) << "after onRecv returned";
}

// A plain message on an unframed connection takes the short way to onRecv (deliverPlain); a
// paused reader must leave it: what arrives is held, in order, until it resumes.
TEST_F(SendReceived, AnUnframedReaderPausedHoldsEveryEchoUntilItResumesThenGetsThemInOrder) {
  evrdma::ConnectionOptions options = messagesOf(false);
  options.recvDepth = 8;
  options.sendDepth = 8;
  connect(options, 4);
  // Round trips first: the echoes take the short way from here on.
  constexpr uint32_t kBefore = 4;
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(kBefore));
  ASSERT_EQ(sender->connection->pauseReceiving(), 0);
  constexpr uint32_t kHeld = 6;  // fewer than recvDepth: unframed, the peer has no credits to wait for
  sender->sendUpTo(kBefore + kHeld);
  ASSERT_TRUE(runUntil([&] { return sender->connection->receivesHeld() == kHeld || failed(); }, 30s))
      << "held " << sender->connection->receivesHeld() << " of " << kHeld << ", delivered while paused "
      << sender->echoes - kBefore << ": " << sender->error << " / " << forwarder->error;
  EXPECT_EQ(sender->echoes, kBefore) << "an echo reached onRecv while receiving was paused";
  ASSERT_EQ(sender->connection->resumeReceiving(), 0);
  ASSERT_TRUE(runUntil([&] { return sender->echoes == kBefore + kHeld || failed(); }, 30s)) << sender->echoes;
  EXPECT_EQ(sender->badEchoes, 0u) << "the held echoes came out of order";
  // Resumed, round trips go on one at a time, the short way again.
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(kBefore + kHeld + 20));
  EXPECT_EQ(sender->badEchoes, 0u);
  EXPECT_EQ(sender->connection->receivesHeld(), 0u);
  EXPECT_EQ(sender->error, "");
  EXPECT_EQ(forwarder->error, "");
}

// Two unframed pairs on one Reactor share its CQ: a poll may hold completions of both (each then
// goes its own connection's way) or of one (handed over in one call). Pausing one reader must hold
// its echoes only: the other's round trips go on, one at a time, meanwhile.
TEST_F(SendReceived, OfTwoUnframedReadersOnOneCqThePausedOneHoldsItsEchoesWhileTheOtherKeepsItsRoundTrips) {
  evrdma::ConnectionOptions options = messagesOf(false);
  options.recvDepth = 8;
  options.sendDepth = 8;
  connect(options, 4);
  Sender* const paused = sender;
  Forwarder* const pausedEcho = forwarder;
  auto handler = std::make_unique<Sender>();
  Sender* const flowing = handler.get();
  evrdma::ClientOptions clientOptions;
  static_cast<evrdma::ConnectionOptions&>(clientOptions) = factory.options;
  auto second = evrdma::Client::create(reactor_, std::move(handler), clientOptions);
  ASSERT_EQ(second->connect(bed_.ip, pair.listener->port()), 0);
  ASSERT_TRUE(runUntil([&] {
    return (flowing->connection != nullptr && factory.forwarder != pausedEcho && factory.forwarder->connection != nullptr) ||
           !flowing->error.empty();
  }, 30s)) << flowing->error;
  Forwarder* const flowingEcho = factory.forwarder;
  const std::vector<evrdma::DeviceStats> devices = reactor_.stats().devices;
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].completions.sharedCqsCreated, 1u) << "the four connections must share one CQ";
  // Both pairs take the short way first.
  constexpr uint32_t kBefore = 4;
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(kBefore));
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(*flowing, kBefore));
  ASSERT_EQ(paused->connection->pauseReceiving(), 0);
  constexpr uint32_t kHeld = 6;  // fewer than recvDepth: unframed, the peer has no credits to wait for
  paused->sendUpTo(kBefore + kHeld);
  // While its echoes come and are held, the other pair's round trips go on.
  constexpr uint32_t kFlowing = 40;
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(*flowing, kFlowing)) << "the flowing pair: " << flowingEcho->error;
  ASSERT_TRUE(runUntil([&] {
    return paused->connection->receivesHeld() == kHeld || paused->echoes > kBefore || failed();
  }, 30s)) << "held " << paused->connection->receivesHeld() << " of " << kHeld;
  ASSERT_EQ(paused->echoes, kBefore) << "an echo reached the paused reader's onRecv";
  EXPECT_EQ(flowing->connection->receivesHeld(), 0u) << "the flowing reader held something";
  ASSERT_EQ(paused->connection->resumeReceiving(), 0);
  ASSERT_TRUE(runUntil([&] { return paused->echoes == kBefore + kHeld || failed(); }, 30s)) << paused->echoes;
  ASSERT_NO_FATAL_FAILURE(oneAtATimeUpTo(kBefore + kHeld + 10));
  EXPECT_EQ(paused->badEchoes, 0u) << "the held echoes came out of order";
  EXPECT_EQ(flowing->badEchoes, 0u);
  EXPECT_EQ(paused->error + pausedEcho->error + flowing->error + flowingEcho->error, "");
  const evrdma::CompletionStats completions = reactor_.stats().devices[0].completions;
  uint64_t pollsWithSome = 0;
  for (size_t n = 1; n < completions.perPoll.size(); ++n) pollsWithSome += completions.perPoll[n];
  std::printf("[ figures  ] polls with completions %llu, of them for one connection %llu\n",
              static_cast<unsigned long long>(pollsWithSome),
              static_cast<unsigned long long>(completions.pollsForOneConnection));
  EXPECT_GT(pollsWithSome, completions.pollsForOneConnection) << "no poll held two connections' completions";
  second.reset();
}

TEST_F(SendReceived, AConnectionOnASharedReceiveQueueRefusesIt) {
  evrdma::ConnectionOptions options = messagesOf(true);
  options.sharedReceiveQueue = true;
  connect(options, 0);
  sender->sendUpTo(1);
  ASSERT_TRUE(runUntil([&] { return forwarder->received == 1 || failed(); }, 30s));
  EXPECT_EQ(forwarder->lastRefusal, -EOPNOTSUPP) << "the pool's buffers are not the connection's to send";
  EXPECT_NE(forwarder->error, "");
}

}  // namespace
