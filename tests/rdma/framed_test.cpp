// Framed connections over real RDMA: credit-based flow control (no RNR retry, and on iWARP no
// broken connection, however slow the receiver) and memory-region exchange over the connection's
// own messages (request / grant / refuse, send a region, release, everything validated).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "evrdma/DeviceCounters.h"
#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;
using evrdma::Connection;
using evrdma::ConnectionState;
using evrdma::MemoryRegion;
using evrdma::RemoteRegion;

uint8_t pattern(size_t i, uint32_t seed) { return static_cast<uint8_t>(i * 7 + seed + (i >> 10)); }

// What one side of a framed connection saw; kept by the test (the agent's handler dies with it).
struct Record {
  Connection* connection = nullptr;
  bool established = false;
  std::vector<uint32_t> messages;  // 4-byte sequence numbers
  std::vector<std::pair<uint32_t, size_t>> immediates;
  std::vector<evrdma::OpCompletion> done;
  std::vector<std::pair<uint64_t, RemoteRegion>> granted, received;
  std::vector<std::pair<uint64_t, int>> refused;
  std::vector<const MemoryRegion*> lent;
  std::vector<uint32_t> heldReceives;  // autoPostRecv off: receives not re-posted yet
  int writable = 0;
  std::string error;
  bool closed = false;
};

struct Peer : evrdma::ConnectionHandler {
  Record& r;
  explicit Peer(Record& record) : r(record) {}
  void onEstablished(Connection& c) noexcept override {
    r.connection = &c;
    r.established = true;
  }
  void onRecv(Connection&, const uint8_t* data, size_t length) noexcept override {
    uint32_t seq = UINT32_MAX;
    if (length == sizeof seq) std::memcpy(&seq, data, sizeof seq);
    r.messages.push_back(seq);
  }
  void onRecvWithImm(Connection&, uint32_t imm, const uint8_t*, size_t length) noexcept override {
    r.immediates.emplace_back(imm, length);
  }
  void onOpDone(Connection&, const evrdma::OpCompletion& op) noexcept override { r.done.push_back(op); }
  void onSendDone(Connection&, uint64_t tag) noexcept override { r.done.push_back({tag, evrdma::OpType::Send}); }
  void onWritable(Connection&) noexcept override { ++r.writable; }
  void onRegionGranted(Connection&, uint64_t tag, const RemoteRegion& region) noexcept override {
    r.granted.emplace_back(tag, region);
  }
  void onRegionRefused(Connection&, uint64_t tag, int err) noexcept override { r.refused.emplace_back(tag, err); }
  void onRegionReceived(Connection&, const RemoteRegion& region, uint64_t tag) noexcept override {
    r.received.emplace_back(tag, region);
  }
  void onRegionLent(Connection&, const MemoryRegion& region) noexcept override { r.lent.push_back(&region); }
  void onError(Connection&, int err, const char* op) noexcept override {
    r.error = std::string(op) + ": " + strerror(-err);
  }
  void onClosed(Connection& c) noexcept override {
    r.closed = true;
    if (r.connection == &c) r.connection = nullptr;
  }
};

struct PeerFactory : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  Record record;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    record = Record{};
    return evrdma::AcceptDecision::accept(std::make_unique<Peer>(record), options);
  }
};

class Framed : public PingPongBed {
 protected:
  void SetUp() override {
    PingPongBed::SetUp();
    factory.options.framed = true;
    factory.options.maxMessageSize = 64;
    factory.options.maxLentBytes = 1 << 20;  // the server lends (off by default)
  }
  void connect(evrdma::ClientOptions options = framedOptions()) {
    server = evrdma::Listener::create(reactor_, factory);
    ASSERT_EQ(server->listen(bed_.ip, 0), 0);
    reconnect(options);
  }
  void reconnect(evrdma::ClientOptions options = framedOptions()) {
    mine = Record{};
    client = evrdma::Client::create(reactor_, std::make_unique<Peer>(mine), options);
    ASSERT_EQ(client->connect(bed_.ip, server->port()), 0);
    ASSERT_TRUE(runUntil([&] { return mine.established && factory.record.established; }, 30s)) << mine.error << " / agent: " << theirs().error;
    int error = 0;
    local = MemoryRegion::allocate(client->protectionDomain(), 4 << 20, evrdma::kLocalWrite, error);
    ASSERT_TRUE(local) << strerror(-error);
  }
  static evrdma::ClientOptions framedOptions() {
    evrdma::ClientOptions options;
    options.framed = true;
    options.maxMessageSize = 64;
    return options;
  }
  void TearDown() override {
    client.reset();
    server.reset();
    PingPongBed::TearDown();
  }
  Record& theirs() { return factory.record; }
  RemoteRegion grant(uint64_t bytes, int access, uint64_t tag) {
    size_t before = mine.granted.size();
    EXPECT_EQ(client->requestRegion(bytes, access, tag), 0);
    EXPECT_TRUE(runUntil([&] { return mine.granted.size() > before || !mine.refused.empty(); }, 30s));
    return mine.granted.size() > before ? mine.granted.back().second : RemoteRegion{};
  }
  void rnrBaseline() { rnrBefore = evrdma::readRnrCounters(client->cmId()->verbs); }
  // RoCE counts RNR NAKs; iWARP has none, and would have ended the connection instead.
  void expectNoRnr() {
    evrdma::RnrCounters after = evrdma::readRnrCounters(client->cmId()->verbs);
    if (after.available) {
      EXPECT_EQ(after.naksReceived, rnrBefore.naksReceived) << "a sender with credits never meets RNR";
      EXPECT_EQ(after.retriesExceeded, rnrBefore.retriesExceeded);
    }
    EXPECT_EQ(client->state(), ConnectionState::Established);
    EXPECT_EQ(mine.error, "");
    EXPECT_EQ(theirs().error, "");
  }

  PeerFactory factory;
  evrdma::Listener::Ptr server;
  evrdma::Client::Ptr client;
  Record mine;
  // A second client's record (a test's own): the fixture's, as its handler may hear onClosed after
  // the test body, while TearDown runs the loop until no connection is left (valgrind saw a local
  // one read after its scope ended).
  Record thief;
  MemoryRegion local;
  evrdma::RnrCounters rnrBefore;
};

TEST_F(Framed, TenThousandSendsThroughASendQueueOfTwoIntoFiveReceivesArriveInOrderWithoutRnr) {
  constexpr uint32_t kMessages = 10000;
  factory.options.recvDepth = 5;  // the fewest a framed connection takes
  auto options = framedOptions();
  options.sendDepth = 2;
  connect(options);
  rnrBaseline();
  for (uint32_t seq = 0; seq < kMessages; ++seq) std::memcpy(local.data() + seq * 4, &seq, 4);
  for (uint32_t seq = 0; seq < kMessages; ++seq) ASSERT_EQ(client->send({&local, seq * 4u, 4}, seq), 0);
  EXPECT_GT(client->sendBacklog(), 9900u) << "without credits from the peer, nearly all must wait";
  ASSERT_TRUE(runUntil([&] { return theirs().messages.size() == kMessages && mine.done.size() == kMessages; }, 300s))
      << "received " << theirs().messages.size() << ", completed " << mine.done.size() << ", error '" << mine.error
      << "' / '" << theirs().error << "'";
  for (uint32_t i = 0; i < kMessages; ++i) {
    ASSERT_EQ(theirs().messages[i], i) << "messages out of order";
    ASSERT_EQ(mine.done[i].tag, i) << "completions out of order";
  }
  EXPECT_EQ(mine.writable, 1) << "onWritable once, when everything waiting went out";
  EXPECT_GT(client->stats().creditWaits, 0u);
  expectNoRnr();
  std::printf("[ figures  ] 10000 sends, queue 2, 5 receives: %llu credit waits, %llu credit-only frames from the peer\n",
              static_cast<unsigned long long>(client->stats().creditWaits),
              static_cast<unsigned long long>(theirs().connection->stats().creditFramesSent));
}

TEST_F(Framed, ASlowReceiverNeverCausesAnRnrRetryOrABrokenConnection) {
  // The receiver keeps every message's buffer and gives them back only now and then. Without
  // credits this is what ends in RNR NAKs (RoCE) or a terminated connection (iWARP): see
  // DataPath.OutrunningThePeersReceives...
  constexpr uint32_t kMessages = 300;
  factory.options.recvDepth = 8;
  factory.options.autoPostRecv = false;
  connect();
  rnrBaseline();
  for (uint32_t seq = 0; seq < kMessages; ++seq) std::memcpy(local.data() + seq * 4, &seq, 4);
  for (uint32_t seq = 0; seq < kMessages; ++seq) ASSERT_EQ(client->send({&local, seq * 4u, 4}, seq), 0);
  size_t stalls = 0;
  evrdma::Timer slowConsumer(reactor_, [&] {
    Connection* c = theirs().connection;
    if (c == nullptr) return;
    // Every receive held but the three kept for protocol frames, and the sender waiting.
    if (c->receivesHeld() == c->recvDepth() - 3 && c->postedRecvs() == 3 && client->sendBacklog() > 0) ++stalls;
    while (c->postRecv() == 0) {
    }
  });
  slowConsumer.startPeriodic(20ms);
  ASSERT_TRUE(runUntil([&] { return theirs().messages.size() == kMessages || !mine.error.empty(); }, 120s))
      << "received " << theirs().messages.size();
  for (uint32_t i = 0; i < kMessages; ++i) ASSERT_EQ(theirs().messages[i], i);
  EXPECT_GT(stalls, 0u) << "the receiver must really have run out of receives for the sender";
  expectNoRnr();
}

TEST_F(Framed, CopiedSendsAndBothKindsOfSendWithImmediateCarryCredits) {
  factory.options.recvDepth = evrdma::ConnectionOptions::kMinFramedRecvDepth;  // the smallest depth credits work with
  connect();
  for (uint32_t seq = 0; seq < 200; ++seq) {
    while (client->freeSendBuffers() == 0) ASSERT_TRUE(runUntil([&] { return client->freeSendBuffers() > 0; }, 30s));
    ASSERT_EQ(client->postSend(&seq, sizeof seq, seq), 0);
  }
  ASSERT_TRUE(runUntil([&] { return theirs().messages.size() == 200; }, 60s)) << theirs().messages.size();
  for (uint32_t i = 0; i < 200; ++i) ASSERT_EQ(theirs().messages[i], i);
  EXPECT_EQ(client->stats().bytesSent, 200u * 4) << "header bytes are not the application's";
  EXPECT_EQ(theirs().connection->stats().bytesReceived, 200u * 4);
  uint32_t seq = 5;
  std::memcpy(local.data(), &seq, 4);
  if (!client->supportsImmediateData()) {
    EXPECT_EQ(client->sendWithImm({&local, 0, 4}, 0xABCD, 1), -EOPNOTSUPP);
    EXPECT_EQ(client->postSendWithImm(&seq, 4, 0xABCE, 2), -EOPNOTSUPP);
    return;
  }
  ASSERT_EQ(client->sendWithImm({&local, 0, 4}, 0xABCD, 1), 0);
  ASSERT_EQ(client->postSendWithImm(&seq, 4, 0xABCE, 2), 0);
  ASSERT_TRUE(runUntil([&] { return theirs().immediates.size() == 2; }, 30s));
  EXPECT_EQ(theirs().immediates[0], (std::pair<uint32_t, size_t>{0xABCD, 4}));
  EXPECT_EQ(theirs().immediates[1], (std::pair<uint32_t, size_t>{0xABCE, 4}));
}

TEST_F(Framed, WritesWithImmediateSpendCreditsAndNeverOutrunTheReceiver) {
  factory.options.recvDepth = 5;
  connect();
  RemoteRegion region = grant(4096, evrdma::kRemoteWrite, 1);
  ASSERT_NE(region.rkey, 0u);
  if (!client->supportsImmediateData()) {  // iWARP
    EXPECT_EQ(client->rdmaWriteWithImm({&local, 0, 8}, region, 0, 1, 1), -EOPNOTSUPP);
    return;
  }
  rnrBaseline();
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(client->rdmaWriteWithImm({&local, 0, 8}, region, 0, i, i), 0);
  ASSERT_TRUE(runUntil([&] { return theirs().immediates.size() == 1000; }, 120s)) << theirs().immediates.size();
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(theirs().immediates[i].first, i);
  expectNoRnr();
}

TEST_F(Framed, ARequestedRegionIsWrittenAndReadBackByTheRequester) {
  constexpr size_t kBytes = 4 << 20;
  factory.options.maxLentBytes = kBytes;  // over the fixture's 1 MiB
  connect();
  RemoteRegion region = grant(kBytes, evrdma::kRemoteWrite | evrdma::kRemoteRead, 42);
  ASSERT_EQ(mine.granted.size(), 1u);
  EXPECT_EQ(mine.granted[0].first, 42u);
  EXPECT_EQ(region.length, kBytes);
  ASSERT_EQ(theirs().lent.size(), 1u) << "the granting side sees what it lent";
  const MemoryRegion& lent = *theirs().lent[0];
  EXPECT_EQ(theirs().connection->lentBytes(), kBytes);

  for (size_t i = 0; i < kBytes; ++i) local.data()[i] = pattern(i, 1);
  ASSERT_EQ(client->rdmaWrite({&local, 0, kBytes}, region, 0, 1), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 1; }, 60s));
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(lent.data()[i], pattern(i, 1)) << "byte " << i;

  for (size_t i = 0; i < kBytes; ++i) lent.data()[i] = pattern(i, 2);
  std::memset(local.data(), 0, kBytes);
  ASSERT_EQ(client->rdmaRead({&local, 0, kBytes}, region, 0, 2), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 2; }, 60s));
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(local.data()[i], pattern(i, 2)) << "byte " << i;
  EXPECT_EQ(mine.error, "");
}

TEST_F(Framed, ASentRegionIsReadByThePeer) {
  connect();
  int error = 0;
  MemoryRegion offered = MemoryRegion::allocate(theirs().connection->protectionDomain(), 1 << 20, evrdma::kRemoteRead, error);
  ASSERT_TRUE(offered);
  for (size_t i = 0; i < offered.length(); ++i) offered.data()[i] = pattern(i, 3);
  ASSERT_EQ(theirs().connection->sendRegion(offered, 7), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.received.empty(); }, 30s));
  EXPECT_EQ(mine.received[0].first, 7u);
  const RemoteRegion region = mine.received[0].second;
  EXPECT_EQ(region.access, static_cast<uint32_t>(evrdma::kRemoteRead));
  EXPECT_EQ(client->rdmaWrite({&local, 0, 8}, region, 0, 1), -EACCES) << "only reads were granted";
  ASSERT_EQ(client->rdmaRead({&local, 0, offered.length()}, region, 0, 1), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 1; }, 30s));
  for (size_t i = 0; i < offered.length(); ++i) ASSERT_EQ(local.data()[i], pattern(i, 3)) << "byte " << i;
  int noRemoteAccess = 0;
  MemoryRegion privateRegion = MemoryRegion::allocate(client->protectionDomain(), 4096, noRemoteAccess, error);
  EXPECT_EQ(client->sendRegion(privateRegion, 1), -EACCES) << "a region without remote access is not sent";
  client.reset();  // before `offered` goes: the peer may use it while connected
  runUntil([&] { return theirs().closed; }, 10s);
}

TEST_F(Framed, AnAccessOutsideAnAdvertisedRegionIsRefusedBeforeItIsPosted) {
  connect();
  RemoteRegion region = grant(4096, evrdma::kRemoteWrite, 1);
  const uint64_t before = client->sendQueueStats().requests;
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, region, 4090, 1), -ERANGE) << "past the end";
  RemoteRegion forgedKey = region;
  forgedKey.rkey ^= 0x100;
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, forgedKey, 0, 1), -ENOENT) << "an rkey the peer never sent";
  RemoteRegion stretched = region;
  stretched.length = 8192;
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, stretched, 4096, 1), -ENOENT) << "longer than advertised";
  RemoteRegion moreAccess = region;
  moreAccess.access |= evrdma::kRemoteRead;
  EXPECT_EQ(client->rdmaRead({&local, 0, 16}, moreAccess, 0, 1), -ENOENT) << "an access never granted";
  RemoteRegion inside = region;  // a part of an advertised region is fine
  inside.address += 1024;
  inside.length = 1024;
  EXPECT_EQ(client->sendQueueStats().requests, before) << "nothing refused reaches the device";
  ASSERT_EQ(client->rdmaWrite({&local, 0, 16}, inside, 1000, 2), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 1; }, 30s));
  EXPECT_EQ(mine.error, "");
  EXPECT_EQ(client->requestRegion(0, evrdma::kRemoteWrite, 1), -EINVAL);
  EXPECT_EQ(client->requestRegion(16, evrdma::kLocalWrite, 1), -EINVAL);
}

TEST_F(Framed, ARequestOverThePeersLimitIsRefusedAndTheConnectionStays) {
  factory.options.maxLentBytes = 1 << 20;
  connect();
  grant(1 << 20, evrdma::kRemoteWrite, 1);
  ASSERT_EQ(mine.granted.size(), 1u);
  ASSERT_EQ(client->requestRegion(1, evrdma::kRemoteWrite, 2), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.refused.empty(); }, 30s));
  EXPECT_EQ(mine.refused[0], (std::pair<uint64_t, int>{2, -ENOMEM}));
  EXPECT_EQ(client->state(), ConnectionState::Established);
  // Releasing the first gives the room back.
  ASSERT_EQ(client->releaseRegion(mine.granted[0].second), 0);
  ASSERT_TRUE(runUntil([&] { return theirs().connection->lentBytes() == 0; }, 30s));
  grant(1 << 20, evrdma::kRemoteWrite, 3);
  EXPECT_EQ(mine.granted.size(), 2u);
}

// Lent regions count against the Reactor's memory budget, across all its connections: a request
// within the connection's maxLentBytes but past the budget is refused (-ENOMEM) and the
// connection carries on; a released region's bytes go back to the budget.
TEST_F(Framed, ARequestPastTheReactorsMemoryBudgetIsRefusedAndItsReleaseGivesTheRoomBack) {
  factory.options.maxLentBytes = 8 << 20;
  connect();
  const uint64_t before = reactor_.registeredMemory();
  reactor_.setMemoryBudget(before + (3 << 19));  // 1.5 MiB more
  grant(1 << 20, evrdma::kRemoteWrite, 1);
  ASSERT_EQ(mine.granted.size(), 1u);
  EXPECT_EQ(reactor_.registeredMemory(), before + (1 << 20));
  ASSERT_EQ(client->requestRegion(1 << 20, evrdma::kRemoteWrite, 2), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.refused.empty(); }, 30s));
  EXPECT_EQ(mine.refused[0], (std::pair<uint64_t, int>{2, -ENOMEM})) << "past the budget, within maxLentBytes";
  EXPECT_EQ(client->state(), ConnectionState::Established);
  ASSERT_EQ(client->releaseRegion(mine.granted[0].second), 0);
  ASSERT_TRUE(runUntil([&] { return reactor_.registeredMemory() == before; }, 30s));
  grant(1 << 20, evrdma::kRemoteWrite, 3);
  EXPECT_EQ(mine.granted.size(), 2u);
  reactor_.setMemoryBudget(0);
}

// With lendingPoolBytes the connection registers its lending memory once, at setup: answering
// the peer's requests registers nothing (the Reactor's registered memory stays put), the pieces
// share the pool's registration, a piece given back is zeroed and lent again, and a request larger
// than what is free is refused while the connection stays.
TEST_F(Framed, RequestsAreServedFromALendingPoolRegisteredAtSetupNotInTheReceivePath) {
  constexpr size_t kPiece = 16 << 10;
  factory.options.lendingPoolBytes = 4 * kPiece;
  connect();
  const uint64_t registeredAtSetup = reactor_.registeredMemory();
  RemoteRegion first = grant(kPiece, evrdma::kRemoteWrite, 1);
  RemoteRegion second = grant(kPiece, evrdma::kRemoteWrite | evrdma::kRemoteRead, 2);
  RemoteRegion third = grant(2 * kPiece, evrdma::kRemoteWrite, 3);
  ASSERT_EQ(mine.granted.size(), 3u);
  EXPECT_EQ(reactor_.registeredMemory(), registeredAtSetup) << "a registration in the receive path";
  EXPECT_EQ(first.rkey, second.rkey) << "one registration covers the pool";
  EXPECT_EQ(second.access, static_cast<uint32_t>(evrdma::kRemoteWrite | evrdma::kRemoteRead));
  EXPECT_EQ(third.length, 2 * kPiece);

  // The pool is full: one more byte is refused, and the connection stays.
  ASSERT_EQ(client->requestRegion(1, evrdma::kRemoteWrite, 4), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.refused.empty(); }, 30s));
  EXPECT_EQ(mine.refused[0], (std::pair<uint64_t, int>{4, -ENOMEM}));
  EXPECT_EQ(client->state(), ConnectionState::Established);

  // Written through one piece, seen in the lent memory, given back, lent again zeroed.
  for (size_t i = 0; i < kPiece; ++i) local.data()[i] = pattern(i, 3);
  ASSERT_EQ(client->rdmaWrite({&local, 0, kPiece}, second, 0, 1), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 1; }, 60s));
  ASSERT_EQ(theirs().lent.size(), 3u);
  for (size_t i = 0; i < kPiece; ++i) ASSERT_EQ(theirs().lent[1]->data()[i], pattern(i, 3)) << "byte " << i;
  ASSERT_EQ(client->releaseRegion(second), 0);
  ASSERT_TRUE(runUntil([&] { return theirs().connection->lentBytes() == 3 * kPiece; }, 30s));
  RemoteRegion again = grant(kPiece, evrdma::kRemoteRead, 5);
  EXPECT_EQ(again.address, second.address) << "the freed piece is lent again";
  ASSERT_EQ(theirs().lent.size(), 4u);
  for (size_t i = 0; i < kPiece; ++i) ASSERT_EQ(theirs().lent[3]->data()[i], 0) << "byte " << i << " not zeroed";
  EXPECT_EQ(reactor_.registeredMemory(), registeredAtSetup);
  EXPECT_EQ(mine.error, "");
  EXPECT_EQ(theirs().error, "");
}

TEST_F(Framed, AReleasedRegionCanNoLongerBeUsed) {
  connect();
  RemoteRegion region = grant(4096, evrdma::kRemoteWrite, 1);
  ASSERT_EQ(client->releaseRegion(region), 0);
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, region, 0, 1), -ENOENT);
  EXPECT_EQ(client->releaseRegion(region), -ENOENT) << "released twice";
  ASSERT_TRUE(runUntil([&] { return theirs().connection->lentBytes() == 0; }, 30s)) << "the peer frees it";
  EXPECT_TRUE(client->peerRegions().empty());
}

TEST_F(Framed, RegionsAreReleasedWhenTheConnectionCloses) {
  connect();
  RemoteRegion region = grant(4096, evrdma::kRemoteWrite, 1);
  ASSERT_NE(region.rkey, 0u);
  client->close();
  ASSERT_TRUE(runUntil([&] { return mine.closed && theirs().closed; }, 30s));

  // A new framed connection does not know the old region.
  reconnect();
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, region, 0, 1), -ENOENT);

  // And the device agrees: the region was deregistered. An unframed connection does not check
  // regions locally, so its write reaches the peer's device, which must refuse it.
  client.reset();
  ASSERT_TRUE(runUntil([&] { return theirs().closed; }, 30s));
  factory.options.framed = false;
  auto raw = framedOptions();
  raw.framed = false;
  reconnect(raw);
  ASSERT_EQ(client->rdmaWrite({&local, 0, 16}, region, 0, 1), 0);
  // RoCE: the write completes with a remote access error. iWARP: a write completes locally once
  // sent, and the peer then terminates the connection, which arrives as a disconnect.
  const bool iwarp = !client->supportsImmediateData();
  ASSERT_TRUE(runUntil([&] { return !mine.error.empty() || mine.closed; }, 30s))
      << "a write into a released region must fail";
  if (!iwarp) {
    EXPECT_NE(mine.error.find("remote access error"), std::string::npos) << mine.error;
    for (const auto& op : mine.done) EXPECT_NE(op.status, IBV_WC_SUCCESS) << "the write went through";
  }
  std::printf("[ figures  ] write into the released region: %s\n",
              mine.error.empty() ? "connection terminated by the peer" : mine.error.c_str());
}

TEST_F(Framed, AConnectionThatLendsNothingRefusesARegionRequestWithEaccesAndStays) {
  factory.options.maxLentBytes = 0;  // the default
  connect();
  ASSERT_EQ(client->requestRegion(4096, evrdma::kRemoteWrite | evrdma::kRemoteRead, 1), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.refused.empty(); }, 30s));
  EXPECT_EQ(mine.refused[0], (std::pair<uint64_t, int>{1, -EACCES}));
  EXPECT_TRUE(mine.granted.empty());
  EXPECT_EQ(theirs().connection->stats().regionsLent, 0u);
  EXPECT_EQ(client->state(), ConnectionState::Established);
  EXPECT_EQ(mine.error, "");
}

// A lending connection has a protection domain of its own: a second connection to the same
// server that knows the lent region's address and rkey cannot reach it. The thief is unframed,
// so its write is not checked locally against advertised regions: the server's device refuses
// it (with one protection domain for all, it went through and overwrote the region).
TEST_F(Framed, ARegionLentToOneConnectionCannotBeWrittenThroughAnotherConnectionOfTheSameServer) {
  connect();
  const RemoteRegion region = grant(4096, evrdma::kRemoteWrite | evrdma::kRemoteRead, 1);
  ASSERT_EQ(theirs().lent.size(), 1u);
  const MemoryRegion* lent = theirs().lent[0];
  for (size_t i = 0; i < 4096; ++i) local.data()[i] = pattern(i, 1);
  ASSERT_EQ(client->rdmaWrite({&local, 0, 4096}, region, 0, 1), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 1; }, 30s));
  ASSERT_EQ(mine.done[0].status, IBV_WC_SUCCESS);

  factory.options.framed = false;  // the thief's agent: lends nothing, on the device's domain
  factory.options.maxLentBytes = 0;
  auto raw = framedOptions();
  raw.framed = false;
  auto second = evrdma::Client::create(reactor_, std::make_unique<Peer>(thief), raw);
  ASSERT_EQ(second->connect(bed_.ip, server->port()), 0);
  ASSERT_TRUE(runUntil([&] { return thief.established; }, 30s)) << thief.error;
  int error = 0;
  MemoryRegion stolen = MemoryRegion::allocate(second->protectionDomain(), 4096, evrdma::kLocalWrite, error);
  ASSERT_TRUE(stolen) << strerror(-error);
  std::memset(stolen.data(), 0x5a, 4096);
  ASSERT_EQ(second->rdmaWrite({&stolen, 0, 4096}, region, 0, 2), 0);
  // RoCE: a remote access error. iWARP: the write completes locally once sent, and the server's
  // side terminates the connection.
  ASSERT_TRUE(runUntil([&] { return !thief.error.empty() || thief.closed; }, 30s)) << "the write must fail";
  if (second->supportsImmediateData()) {  // not iWARP
    EXPECT_NE(thief.error.find("remote access error"), std::string::npos) << thief.error;
    for (const auto& op : thief.done) EXPECT_NE(op.status, IBV_WC_SUCCESS) << "the write went through";
  }
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(lent->data()[i], pattern(i, 1)) << "byte " << i << " overwritten";
  std::printf("[ figures  ] another connection's write into the lent region: %s\n",
              thief.error.empty() ? "connection terminated by the server" : thief.error.c_str());

  // The borrower's own access goes on.
  std::memset(local.data(), 0, 4096);
  ASSERT_EQ(client->rdmaRead({&local, 0, 4096}, region, 0, 3), 0);
  ASSERT_TRUE(runUntil([&] { return mine.done.size() == 2; }, 30s));
  EXPECT_EQ(mine.done[1].status, IBV_WC_SUCCESS);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(local.data()[i], pattern(i, 1)) << "byte " << i;
  EXPECT_EQ(mine.error, "");
  second.reset();
}

TEST_F(Framed, APeerCannotMakeUsTrackMoreRegionsThanMaxPeerRegions) {
  auto options = framedOptions();
  options.maxPeerRegions = 2;
  connect(options);
  grant(4096, evrdma::kRemoteWrite, 1);
  grant(4096, evrdma::kRemoteWrite, 2);
  EXPECT_EQ(client->requestRegion(4096, evrdma::kRemoteWrite, 3), -ENOSPC) << "we asked for enough";
  ASSERT_EQ(client->releaseRegion(mine.granted[0].second), 0);
  EXPECT_NE(grant(4096, evrdma::kRemoteWrite, 3).rkey, 0u) << "a release makes room";
  // The peer keeps sending regions nobody asked for: that breaks the protocol.
  int error = 0;
  MemoryRegion offered = MemoryRegion::allocate(theirs().connection->protectionDomain(), 4096, evrdma::kRemoteRead, error);
  ASSERT_EQ(theirs().connection->sendRegion(offered, 9), 0);
  ASSERT_TRUE(runUntil([&] { return !mine.error.empty(); }, 30s));
  EXPECT_NE(mine.error.find("more regions than maxPeerRegions"), std::string::npos) << mine.error;
  ASSERT_TRUE(runUntil([&] { return theirs().closed; }, 30s));
}

TEST_F(Framed, AMalformedFrameEndsTheConnectionWithAProtocolError) {
  // An unframed client talks to a framed server: its bytes are not frames.
  auto raw = framedOptions();
  raw.framed = false;
  server = evrdma::Listener::create(reactor_, factory);
  ASSERT_EQ(server->listen(bed_.ip, 0), 0);
  client = evrdma::Client::create(reactor_, std::make_unique<Peer>(mine), raw);
  ASSERT_EQ(client->connect(bed_.ip, server->port()), 0);
  // The framed server waits for a hello that never comes: it is not established for its handler.
  ASSERT_TRUE(runUntil([&] { return mine.established; }, 30s)) << mine.error;
  EXPECT_FALSE(theirs().established);
  const char garbage[] = "not a frame at all";
  ASSERT_EQ(client->postSend(garbage, sizeof garbage), 0);
  ASSERT_TRUE(runUntil([&] { return !theirs().error.empty(); }, 30s));
  EXPECT_NE(theirs().error.find("malformed frame"), std::string::npos) << theirs().error;
  EXPECT_NE(theirs().error.find(strerror(EPROTO)), std::string::npos) << theirs().error;
  EXPECT_TRUE(runUntil([&] { return theirs().closed && mine.closed; }, 30s));
}

// The two sides exchange their maxMessageSize in their first frames: a send longer than the peer
// takes is refused before anything is posted, and the connection stays up.
TEST_F(Framed, SidesWithDifferentMessageSizesRefuseWhatThePeerCannotTakeBeforePosting) {
  evrdma::ClientOptions options = framedOptions();
  options.maxMessageSize = 4096;  // the server takes 64
  connect(options);
  EXPECT_EQ(client->peerMaxMessageSize(), 64u);
  EXPECT_EQ(theirs().connection->peerMaxMessageSize(), 4096u);
  std::vector<uint8_t> big(65, 1);
  EXPECT_EQ(client->postSend(big.data(), big.size()), -EMSGSIZE);
  EXPECT_EQ(client->send({&local, 0, 65}, 1), -EMSGSIZE);
  uint32_t seq = 7;
  std::memcpy(local.data(), &seq, sizeof seq);
  ASSERT_EQ(client->postSend(&seq, sizeof seq), 0);
  ASSERT_EQ(client->send({&local, 0, sizeof seq}, 2), 0);
  std::vector<uint8_t> justFits(64, 2);
  ASSERT_EQ(client->postSend(justFits.data(), justFits.size()), 0);
  ASSERT_TRUE(runUntil([&] { return theirs().messages.size() == 3; }, 30s));
  std::vector<uint8_t> toClient(4096, 3);  // the server's own limit is 64: refused by its own check
  EXPECT_EQ(theirs().connection->postSend(toClient.data(), toClient.size()), -EMSGSIZE);
  EXPECT_EQ(client->state(), ConnectionState::Established);
  EXPECT_EQ(mine.error, "");
  EXPECT_EQ(theirs().error, "");
}

TEST_F(Framed, RegionExchangeNeedsAFramedConnectionAndTooSmallAReceiveDepthIsRefused) {
  auto raw = framedOptions();
  raw.framed = false;
  factory.options.framed = false;
  connect(raw);
  EXPECT_EQ(client->requestRegion(4096, evrdma::kRemoteWrite, 1), -EPROTONOSUPPORT);
  evrdma::ConnectionOptions tooShallow;
  tooShallow.framed = true;
  tooShallow.recvDepth = 2;
  const char* problem = "";
  EXPECT_EQ(Connection::checkOptions(tooShallow, problem), -EINVAL);
  EXPECT_NE(std::string(problem).find("recvDepth"), std::string::npos);
}

}  // namespace
