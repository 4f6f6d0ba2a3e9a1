// The data path over real RDMA: RDMA write, read and write-with-immediate with every byte checked,
// bounds and access refused before anything is posted, a tiny send queue with an ordered backlog,
// batches. Both ends live in this process, so a test can look straight into the peer's memory;
// the region travels out of band here (the memory-region exchange protocol carries it otherwise).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "evrdma/DeviceCounters.h"
#include "rdma/PingPongBed.h"

namespace {

using namespace evrdma::test;
using evrdma::Connection;
using evrdma::MemoryRegion;
using evrdma::RemoteRegion;

constexpr size_t kRegionSize = 4 << 20;

uint8_t pattern(size_t i, uint32_t seed) { return static_cast<uint8_t>(i * 13 + seed + (i >> 12)); }

// The passive side: a region peers may read and write, and a record of what arrives.
struct Target : evrdma::ConnectionHandler {
  Connection* connection = nullptr;
  MemoryRegion region;
  int access;
  std::vector<uint32_t>& messages;  // 4-byte sequence numbers received (kept by the factory: the
                                   // agent and this handler are freed when the connection ends)
  std::string& failure;            // the first error reported, kept by the factory too
  std::vector<std::pair<uint32_t, size_t>> immediates;
  Target(int a, std::vector<uint32_t>& m, std::string& f) : access(a), messages(m), failure(f) {}
  void onEstablished(Connection& c) noexcept override {
    connection = &c;
    int error = 0;
    region = MemoryRegion::allocate(c.protectionDomain(), kRegionSize, access, error);
  }
  void onRecv(Connection&, const uint8_t* data, size_t length) noexcept override {
    uint32_t seq = 0;
    if (length == sizeof seq) std::memcpy(&seq, data, sizeof seq);
    messages.push_back(seq);
  }
  void onRecvWithImm(Connection&, uint32_t imm, const uint8_t*, size_t length) noexcept override {
    immediates.emplace_back(imm, length);
  }
  bool disconnected = false;
  void onError(Connection&, int err, const char* op) noexcept override {
    if (failure.empty()) failure = std::string(op) + ": " + strerror(-err);
  }
  void onDisconnected(Connection&) noexcept override { disconnected = true; }
};

struct TargetFactory : evrdma::AgentFactory {
  int access;
  uint32_t recvDepth = 16;
  bool autoPostRecv = true;
  Target* target = nullptr;
  std::vector<uint32_t> messages;
  std::string targetFailure;
  explicit TargetFactory(int a) : access(a) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    auto handler = std::make_unique<Target>(access, messages, targetFailure);
    target = handler.get();
    evrdma::ConnectionOptions options;
    options.maxMessageSize = 64;
    options.recvDepth = recvDepth;
    options.autoPostRecv = autoPostRecv;
    return evrdma::AcceptDecision::accept(std::move(handler), options);
  }
};

// The active side: records completions in order, and when the backlog drained.
struct Initiator : evrdma::ConnectionHandler {
  bool established = false;
  std::vector<evrdma::OpCompletion> done;
  int writable = 0;
  std::string error;
  void onEstablished(Connection&) noexcept override { established = true; }
  void onOpDone(Connection&, const evrdma::OpCompletion& op) noexcept override { done.push_back(op); }
  void onWritable(Connection&) noexcept override { ++writable; }
  void onError(Connection&, int err, const char* op) noexcept override { error = std::string(op) + ": " + strerror(-err); }
  bool closed = false;
  size_t doneAtClose = 0;
  void onClosed(Connection&) noexcept override {
    closed = true;
    doneAtClose = done.size();
  }
};

class DataPath : public PingPongBed {
 protected:
  // Connects an Initiator to a Target whose region grants `access`.
  void connect(int access, uint32_t sendDepth = 16, uint32_t targetRecvDepth = 16, bool targetReposts = true) {
    factory = std::make_unique<TargetFactory>(access);
    factory->recvDepth = targetRecvDepth;
    factory->autoPostRecv = targetReposts;
    server = evrdma::Listener::create(reactor_, *factory);
    ASSERT_EQ(server->listen(bed_.ip, 0), 0);
    auto handler = std::make_unique<Initiator>();
    initiator = handler.get();
    evrdma::ClientOptions options;
    options.maxMessageSize = 64;
    options.sendDepth = sendDepth;
    client = evrdma::Client::create(reactor_, std::move(handler), options);
    ASSERT_EQ(client->connect(bed_.ip, server->port()), 0);
    ASSERT_TRUE(runUntil([&] { return initiator->established && factory->target && factory->target->region; }, 30s));
    ASSERT_EQ(factory->target->region.remote(remote), 0);
    int error = 0;
    local = MemoryRegion::allocate(client->protectionDomain(), kRegionSize, evrdma::kLocalWrite, error);
    ASSERT_TRUE(local) << strerror(-error);
  }
  void TearDown() override {
    client.reset();
    server.reset();
    PingPongBed::TearDown();
  }
  bool completedAll(size_t n) { return initiator->done.size() >= n || !initiator->error.empty(); }

  std::unique_ptr<TargetFactory> factory;
  evrdma::Listener::Ptr server;
  evrdma::Client::Ptr client;
  Initiator* initiator = nullptr;
  MemoryRegion local;
  RemoteRegion remote;
};

class DataPathSizes : public DataPath, public ::testing::WithParamInterface<size_t> {};

TEST_P(DataPathSizes, WriteReadAndWriteWithImmCarryEveryByte) {
  const size_t size = GetParam();
  connect(evrdma::kRemoteRead | evrdma::kRemoteWrite);
  uint8_t* mine = local.data();
  uint8_t* theirs = factory->target->region.data();
  for (size_t i = 0; i < size; ++i) mine[i] = pattern(i, 1);

  // RDMA write: our bytes land in their region, at an offset.
  const uint64_t at = size < kRegionSize ? (kRegionSize - size) / 2 : 0;
  ASSERT_EQ(client->rdmaWrite({&local, 0, size}, remote, at, 1), 0);
  ASSERT_TRUE(runUntil([&] { return completedAll(1); }, 60s));
  ASSERT_EQ(initiator->error, "");
  EXPECT_EQ(initiator->done[0].tag, 1u);
  EXPECT_EQ(initiator->done[0].type, evrdma::OpType::Write);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(theirs[at + i], pattern(i, 1)) << "write: byte " << i;

  // RDMA read: what the peer wrote in its own region comes back into ours.
  for (size_t i = 0; i < size; ++i) theirs[at + i] = pattern(i, 2);
  std::memset(mine, 0, size);
  ASSERT_EQ(client->rdmaRead({&local, 0, size}, remote, at, 2), 0);
  ASSERT_TRUE(runUntil([&] { return completedAll(2); }, 60s));
  ASSERT_EQ(initiator->error, "");
  EXPECT_EQ(initiator->done[1].type, evrdma::OpType::Read);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(mine[i], pattern(i, 2)) << "read: byte " << i;

  // RDMA write with immediate: the bytes, and the immediate with the length at the peer. iWARP
  // has no immediate data: there the request must be refused up front, and nothing else change.
  for (size_t i = 0; i < size; ++i) mine[i] = pattern(i, 3);
  if (!client->supportsImmediateData()) {
    EXPECT_EQ(client->rdmaWriteWithImm({&local, 0, size}, remote, 0, 0xC0FFEE, 3), -EOPNOTSUPP);
    EXPECT_EQ(client->state(), evrdma::ConnectionState::Established);
    return;
  }
  ASSERT_EQ(client->rdmaWriteWithImm({&local, 0, size}, remote, 0, 0xC0FFEE, 3), 0);
  ASSERT_TRUE(runUntil([&] { return completedAll(3) && !factory->target->immediates.empty(); }, 60s));
  ASSERT_EQ(initiator->error, "");
  EXPECT_EQ(factory->target->immediates[0].first, 0xC0FFEEu);
  EXPECT_EQ(factory->target->immediates[0].second, size);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(theirs[i], pattern(i, 3)) << "write with imm: byte " << i;
}

INSTANTIATE_TEST_SUITE_P(OneByteToFourMebibytes, DataPathSizes,
                         ::testing::Values(1, 4096, 65536, 1 << 20, 4 << 20),
                         [](const ::testing::TestParamInfo<size_t>& param) { return std::to_string(param.param) + "B"; });

TEST_F(DataPath, SendWithImmDeliversTheImmediateAndTheBytes) {
  connect(evrdma::kRemoteWrite);
  uint32_t seq = 77;
  std::memcpy(local.data(), &seq, sizeof seq);
  if (!client->supportsImmediateData()) {  // iWARP
    EXPECT_EQ(client->sendWithImm({&local, 0, sizeof seq}, 0x1234, 9), -EOPNOTSUPP);
    EXPECT_EQ(client->postSendWithImm(&seq, sizeof seq, 0x5678, 10), -EOPNOTSUPP);
    return;
  }
  ASSERT_EQ(client->sendWithImm({&local, 0, sizeof seq}, 0x1234, 9), 0);
  ASSERT_EQ(client->postSendWithImm(&seq, sizeof seq, 0x5678, 10), 0) << "the copying variant";
  ASSERT_TRUE(runUntil([&] { return factory->target->immediates.size() == 2; }, 30s));
  EXPECT_EQ(factory->target->immediates[0].first, 0x1234u);
  EXPECT_EQ(factory->target->immediates[0].second, sizeof seq);
  EXPECT_EQ(factory->target->immediates[1].first, 0x5678u);
}

TEST_F(DataPath, AccessOutsideTheRegionOrNotGrantedIsRefusedBeforeItIsPosted) {
  connect(evrdma::kRemoteRead);  // the peer grants reads only
  uint64_t before = client->sendQueueStats().requests;
  EXPECT_EQ(client->rdmaRead({&local, 0, 16}, remote, kRegionSize - 8, 1), -ERANGE) << "runs past the remote end";
  EXPECT_EQ(client->rdmaRead({&local, 0, 16}, remote, UINT64_MAX - 4, 1), -ERANGE) << "offset overflow";
  EXPECT_EQ(client->rdmaWrite({&local, 0, 16}, remote, 0, 1), -EACCES) << "write was not granted";
  EXPECT_EQ(client->rdmaRead({&local, kRegionSize - 8, 16}, remote, 0, 1), -ERANGE) << "past the local end";
  int error = 0;
  MemoryRegion readOnly = MemoryRegion::allocate(client->protectionDomain(), 4096, 0, error);
  ASSERT_TRUE(readOnly);
  EXPECT_EQ(client->rdmaRead({&readOnly, 0, 16}, remote, 0, 1), -EACCES) << "read target without local write";
  EXPECT_EQ(client->rdmaRead({nullptr, 0, 16}, remote, 0, 1), -EINVAL);
  EXPECT_EQ(client->sendQueueStats().requests, before) << "a refused request must never reach the device";
  EXPECT_EQ(client->rdmaRead({&local, 0, 16}, remote, kRegionSize - 16, 2), 0) << "the last 16 bytes are fine";
  ASSERT_TRUE(runUntil([&] { return completedAll(1); }, 30s));
  EXPECT_EQ(initiator->error, "");
}

TEST_F(DataPath, TenThousandWritesThroughASendQueueOfTwoCompleteInOrder) {
  // Writes consume no receive at the peer, so no flow control is needed to push 10 000 of them.
  constexpr uint32_t kWrites = 10000;
  connect(evrdma::kRemoteWrite, /*sendDepth=*/2);
  for (uint32_t seq = 0; seq < kWrites; ++seq) std::memcpy(local.data() + seq * 4, &seq, 4);
  for (uint32_t seq = 0; seq < kWrites; ++seq) ASSERT_EQ(client->rdmaWrite({&local, seq * 4u, 4}, remote, seq * 4u, seq), 0);
  EXPECT_GT(client->sendBacklog(), 9000u) << "most writes must wait in the backlog";
  EXPECT_LE(client->sendQueueStats().inFlight, 2u);
  ASSERT_TRUE(runUntil([&] { return completedAll(kWrites); }, 300s)) << "completed " << initiator->done.size();
  ASSERT_EQ(initiator->error, "");
  for (uint32_t i = 0; i < kWrites; ++i) ASSERT_EQ(initiator->done[i].tag, i) << "completions out of order";
  EXPECT_EQ(std::memcmp(factory->target->region.data(), local.data(), kWrites * 4), 0) << "the peer's memory";
  EXPECT_EQ(initiator->writable, 1) << "onWritable once, when the backlog drained";
  EXPECT_EQ(client->sendBacklog(), 0u);
  std::printf("[ figures  ] 10000 writes through a queue of 2: %llu posts, %llu signaled\n",
              static_cast<unsigned long long>(client->sendQueueStats().posts),
              static_cast<unsigned long long>(client->sendQueueStats().signaled));
}

TEST_F(DataPath, BackloggedSendsArriveInOrder) {
  // 1000 sends, all within the receiver's 1024 posted receives: this connection is unframed, and
  // iWARP has no RNR retry, so more than that needs credits (Framed.TenThousandSends...).
  constexpr uint32_t kMessages = 1000;
  connect(evrdma::kRemoteWrite, /*sendDepth=*/2, /*targetRecvDepth=*/1024);
  for (uint32_t seq = 0; seq < kMessages; ++seq) std::memcpy(local.data() + seq * 4, &seq, 4);
  for (uint32_t seq = 0; seq < kMessages; ++seq) ASSERT_EQ(client->send({&local, seq * 4u, 4}, seq), 0);
  ASSERT_TRUE(runUntil([&] { return completedAll(kMessages) && factory->messages.size() == kMessages; }, 120s))
      << "completed " << initiator->done.size() << ", received " << factory->messages.size() << ", client "
      << evrdma::toString(client->state()) << ", error '" << initiator->error << "'";
  for (uint32_t i = 0; i < kMessages; ++i) {
    ASSERT_EQ(initiator->done[i].tag, i) << "completions out of order";
    ASSERT_EQ(factory->messages[i], i) << "messages out of order";
  }
  EXPECT_EQ(initiator->writable, 1);
}

TEST_F(DataPath, OutrunningThePeersReceivesIsRetriedOnRoceAndEndsTheConnectionOnIwarp) {
  // 100 sends against 64 receives that the receiver does not re-post by itself. RoCE answers the
  // 65th with RNR NAKs and retries until receives are posted again (here: by hand, a little later);
  // iWARP has no such retry: the receiver terminates the connection. The sender's connection then
  // ends (it must not hang) and reports every send exactly once. Credit-based flow control is what
  // keeps a sender from getting there.
  constexpr uint32_t kMessages = 100, kReceives = 64;
  connect(evrdma::kRemoteWrite, /*sendDepth=*/16, /*targetRecvDepth=*/kReceives, /*targetReposts=*/false);
  const ibv_context* device = client->cmId()->verbs;
  evrdma::RnrCounters before = evrdma::readRnrCounters(device);
  for (uint32_t seq = 0; seq < kMessages; ++seq) std::memcpy(local.data() + seq * 4, &seq, 4);
  for (uint32_t seq = 0; seq < kMessages; ++seq) ASSERT_EQ(client->send({&local, seq * 4u, 4}, seq), 0);
  bool iwarp = !client->supportsImmediateData();
  ASSERT_TRUE(runUntil([&] { return factory->messages.size() >= kReceives || !initiator->error.empty(); }, 60s));
  // The sender is now stuck on RNR (RoCE) or failed (iWARP).
  if (iwarp) {
    auto ended = [&] {
      auto s = client->state();
      return s == evrdma::ConnectionState::Failed || s == evrdma::ConnectionState::Closed;
    };
    ASSERT_TRUE(runUntil(ended, 30s)) << "client " << evrdma::toString(client->state());
    ASSERT_EQ(factory->messages.size(), kReceives);
    for (uint32_t i = 0; i < kReceives; ++i) EXPECT_EQ(factory->messages[i], i) << "the first receives, in order";
    // Every send is reported exactly once, in the order issued: posted ones complete or are
    // flushed, those never posted come back with a flush status. How many report success says
    // nothing about delivery here: an iWARP send completes once the transport took it (siw: once
    // TCP has it), so under load all 100 may succeed while only 64 were placed.
    ASSERT_EQ(initiator->done.size(), kMessages);
    size_t succeeded = 0;
    for (uint32_t i = 0; i < kMessages; ++i) {
      EXPECT_EQ(initiator->done[i].tag, i) << "each send reported once, in order";
      succeeded += initiator->done[i].status == IBV_WC_SUCCESS;
    }
    const evrdma::ConnectionStats& stats = client->stats();
    std::printf("[ figures  ] sender: %zu succeeded, %llu flushed, %llu never posted; receiver: %s\n", succeeded,
                static_cast<unsigned long long>(stats.flushedCompletions),
                static_cast<unsigned long long>(stats.requestsDropped),
                factory->targetFailure.empty() ? "no error" : factory->targetFailure.c_str());
    EXPECT_FALSE(before.available) << "iWARP has no RNR, so no RNR counters";
  } else {
    // Until the device counts the stalled sends' NAKs.
    ASSERT_TRUE(runUntil([&] { return evrdma::readRnrCounters(device).naksReceived > before.naksReceived; }, 30s))
        << "the stalled sends never showed as RNR NAKs";
    EXPECT_EQ(factory->messages.size(), kReceives);
    EXPECT_EQ(initiator->error, "");
    evrdma::RnrCounters during = evrdma::readRnrCounters(device);
    ASSERT_TRUE(during.available) << "RoCE devices count RNR NAKs";
    EXPECT_GT(during.naksReceived, before.naksReceived) << "the stalled sends must show as RNR NAKs";
    std::printf("[ figures  ] RNR NAKs received while stalled: %llu\n",
                static_cast<unsigned long long>(during.naksReceived - before.naksReceived));
    for (uint32_t i = 0; i < kMessages - kReceives; ++i) ASSERT_EQ(factory->target->connection->postRecv(), 0);
    ASSERT_TRUE(runUntil([&] { return factory->messages.size() == kMessages && completedAll(kMessages); }, 60s));
    for (uint32_t i = 0; i < kMessages; ++i) ASSERT_EQ(factory->messages[i], i);
  }
  std::printf("[ figures  ] %u sends into %u receives: %zu delivered, sender %s%s%s\n", kMessages, kReceives,
              factory->messages.size(), evrdma::toString(client->state()), initiator->error.empty() ? "" : ": ",
              initiator->error.c_str());
}

// close() with 200 writes issued through a send queue of 2: some complete, the teardown flushes
// the posted ones and drops the waiting ones, and every one of them comes back exactly once, in
// the order issued, before onClosed, so the memory each used can be given back.
TEST_F(DataPath, EveryOperationOfAClosedConnectionIsReportedOnceBeforeOnClosed) {
  constexpr uint64_t kWrites = 200;
  connect(evrdma::kRemoteWrite, /*sendDepth=*/2);
  for (uint64_t i = 0; i < kWrites; ++i) ASSERT_EQ(client->rdmaWrite({&local, i * 4096, 4096}, remote, i * 4096, i), 0);
  client->close();
  ASSERT_TRUE(runUntil([&] { return initiator->closed; }, 30s));
  EXPECT_EQ(initiator->doneAtClose, kWrites) << "operations reported after onClosed (or never)";
  ASSERT_EQ(initiator->done.size(), kWrites);
  size_t flushed = 0;
  for (uint64_t i = 0; i < kWrites; ++i) {
    EXPECT_EQ(initiator->done[i].tag, i);
    const ibv_wc_status status = initiator->done[i].status;
    EXPECT_TRUE(status == IBV_WC_SUCCESS || status == IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(status);
    flushed += status == IBV_WC_WR_FLUSH_ERR;
  }
  EXPECT_GT(flushed, 0u);
  std::printf("[ figures  ] close() with %llu writes issued: %zu completed, %zu flushed or never posted\n",
              static_cast<unsigned long long>(kWrites), static_cast<size_t>(kWrites) - flushed, flushed);
}

TEST_F(DataPath, ABatchGoesToTheDeviceInOnePostAndSignalsSelectively) {
  connect(evrdma::kRemoteWrite, /*sendDepth=*/32);
  uint64_t postsBefore = client->sendQueueStats().posts;
  uint64_t signaledBefore = client->sendQueueStats().signaled;
  client->beginBatch();
  for (uint64_t i = 0; i < 16; ++i) ASSERT_EQ(client->rdmaWrite({&local, i * 4096, 4096}, remote, i * 4096, i), 0);
  ASSERT_EQ(client->endBatch(), 0);
  EXPECT_EQ(client->sendQueueStats().posts, postsBefore + 1);
  EXPECT_EQ(client->sendQueueStats().signaled, signaledBefore + 2) << "every 8th of 16 (sendDepth 32 / 4)";
  ASSERT_TRUE(runUntil([&] { return completedAll(16); }, 30s));
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(initiator->done[i].tag, i);
}

}  // namespace
