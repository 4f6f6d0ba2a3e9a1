// The demo servers' agents against clients that lie within the protocol, over real RDMA. blast: a
// client that asks for a region smaller than its own request, and one that releases its region
// before saying it is done. pingpong: a client that floods messages and never takes its echoes.
// Each is closed with a reason that names what it did, nothing is read outside what was lent (the
// released region used to be read after it was freed), the echo backlog stays bounded (it used to
// grow without limit), and a well-behaved client is served after.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "Blast.h"
#include "PingPong.h"
#include "PingSr.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;
using evrdma::test::runUntil;

// Asks for a region of `regionBytes`, optionally releases it at once, then sends blast's "done"
// (an empty message) without writing anything.
struct RegionLiar : evrdma::ConnectionHandler {
  uint64_t regionBytes = 0;
  bool releaseFirst = false;
  bool closed = false;
  void onEstablished(evrdma::Connection& c) noexcept override {
    if (c.requestRegion(regionBytes, evrdma::kRemoteWrite, 1) != 0) c.close();
  }
  void onRegionGranted(evrdma::Connection& c, uint64_t, const evrdma::RemoteRegion& region) noexcept override {
    if (releaseFirst) (void)c.releaseRegion(region);
    (void)c.postSend(nullptr, 0);  // "done"
  }
  void onRegionRefused(evrdma::Connection& c, uint64_t, int) noexcept override { c.close(); }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

class HostileBlast : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed));
    ASSERT_TRUE(reactor.valid());
    factory.agentClosedHook = [this](const blast::BlastAgent& agent, const evrdma::Connection&) {
      ++agentsClosed;
      lastError = agent.error;
      lastComplete = agent.complete;
    };
    listener = evrdma::Listener::create(reactor, factory);
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  }
  // Connects `handler` with a blast request of write mode, 8 buffers of 64 KiB; runs until the
  // server's agent has closed.
  void attack(std::unique_ptr<RegionLiar> handler) {
    RegionLiar* liar = handler.get();
    const int before = agentsClosed;
    evrdma::Client::Ptr client =
        evrdma::Client::create(reactor, std::move(handler), blast::BlastClient::options(request));
    ASSERT_EQ(client->connect(bed.ip, listener->port(), blast::encode(request)), 0);
    ASSERT_TRUE(runUntil(reactor, [&] { return agentsClosed > before && liar->closed; }, 60s));
  }
  // A real blast client afterwards: served, every byte checked.
  void wellBehavedClientIsServed() {
    const blast::Result result = runClient(request);
    EXPECT_TRUE(result.succeeded) << result.error;
    EXPECT_EQ(result.operations, request.count);
    ASSERT_TRUE(runUntil(reactor, [&] { return agentsClosed > 0 && lastComplete; }, 60s));
  }

  // A real blast client with `r`, run until it is done: its result.
  blast::Result runClient(const blast::Request& r) {
    blast::Result result;
    bool done = false;
    evrdma::Client::Ptr client = evrdma::Client::create(
        reactor,
        std::make_unique<blast::BlastClient>(0, r, false,
                                             [&](const blast::Result& got) {
                                               result = got;
                                               done = true;
                                             }),
        blast::BlastClient::options(r));
    EXPECT_EQ(client->connect(bed.ip, listener->port(), blast::encode(r)), 0);
    EXPECT_TRUE(runUntil(reactor, [&] { return done; }, 60s));
    return result;
  }

  evrdma::test::TestBed bed;
  evrdma::Reactor reactor;
  blast::BlastFactory factory{blast::Limits{}, false};
  evrdma::Listener::Ptr listener;
  blast::Request request{blast::Mode::Write, 8, 65536, 64, true};
  int agentsClosed = 0;
  std::string lastError;
  bool lastComplete = false;
};

TEST_F(HostileBlast, AClientAskingForLessRegionThanItsRequestNeedsIsClosedWithTheSizes) {
  auto liar = std::make_unique<RegionLiar>();
  liar->regionBytes = 1;
  attack(std::move(liar));
  EXPECT_FALSE(lastComplete);
  EXPECT_EQ(lastError, "the client asked for a region of 1 B; its request of 8 buffers of 65536 B needs 524288");
  wellBehavedClientIsServed();
}

TEST_F(HostileBlast, AClientThatReleasesItsRegionBeforeItIsDoneIsClosedWithoutTheRegionBeingRead) {
  auto liar = std::make_unique<RegionLiar>();
  liar->regionBytes = 8 * 65536;
  liar->releaseFirst = true;
  attack(std::move(liar));
  EXPECT_FALSE(lastComplete);
  EXPECT_EQ(lastError, "the client ended without a region to check (never asked for, or released)");
  wellBehavedClientIsServed();
}

TEST_F(HostileBlast, AReadClientsLargeRegionIsFilledAPiecePerLoopTurnWhileTheLoopGoesOn) {
  // A 1 ms timer of the application's: it counts the ticks that come while a region is filling.
  int ticksWhileFilling = 0;
  evrdma::Timer tick(reactor, [&] {
    if (factory.regionsBeingFilled > 0) ++ticksWhileFilling;
  });
  ASSERT_EQ(tick.startPeriodic(1ms), 0);
  const blast::Request read{blast::Mode::Read, 32, 1u << 20, 64, true};
  const blast::Result result = runClient(read);
  EXPECT_TRUE(result.succeeded) << result.error;  // every byte of the region checked by the client
  EXPECT_EQ(factory.regionsBeingFilled, 0u);
  // 32 MiB at 1 MiB a turn; filled in one go (as it used to be), no tick could come in between.
  std::printf("ticks while the 32 MiB region was filling: %d\n", ticksWhileFilling);
  EXPECT_GE(ticksWhileFilling, 2);
}

TEST_F(HostileBlast, PastTheServersMemoryBudgetRequestsAreRejectedSayingWhatIsInUseAndASmallerOneIsServed) {
  reactor.setMemoryBudget(16u << 20);
  factory.chargeReadRegionsTo(reactor);
  // The region read-mode agents register themselves is charged to the Reactor's budget ...
  const blast::Result read = runClient({blast::Mode::Read, 32, 1u << 20, 8, true});
  EXPECT_FALSE(read.succeeded);
  EXPECT_NE(read.error.find("rejected: memory budget: "), std::string::npos) << read.error;
  EXPECT_NE(read.error.find("of 16 MiB in use, the region to read needs 32 MiB"), std::string::npos) << read.error;
  // ... what evrdma registers (here a 32 MiB lending pool) by the Reactor's budget.
  const blast::Result write = runClient({blast::Mode::Write, 32, 1u << 20, 8, true});
  EXPECT_FALSE(write.succeeded);
  EXPECT_NE(write.error.find("lending pool (ConnectionOptions::lendingPoolBytes): memory budget: "), std::string::npos)
      << write.error;
  wellBehavedClientIsServed();  // 8 x 64 KiB
}

TEST_F(HostileBlast, ARequestOverThePerClientMemoryIsRejectedBeforeAnAgentIsMade) {
  const blast::Result result = runClient({blast::Mode::Write, 1024, 16u << 20, 8, true});
  EXPECT_FALSE(result.succeeded);
  EXPECT_EQ(result.error,
            "rejected: buffers x size = 1024 x 16777216 B = 16384 MiB, more than the 256 MiB one client may have");
  EXPECT_EQ(listener->stats().rejected, 1u);
  EXPECT_EQ(agentsClosed, 0) << "no agent was made";
  wellBehavedClientIsServed();
}

// ping-sr with one receive that it never posts again, and 40 messages at once: the agent's echoes
// find no receive, so its send buffers stay taken and the echoes pile up.
struct EchoHog : evrdma::ConnectionHandler {
  bool closed = false;
  void onEstablished(evrdma::Connection& c) noexcept override {
    const uint8_t message[64] = {};
    c.beginBatch();
    for (int i = 0; i < 40; ++i) (void)c.postSend(message, sizeof message);
    (void)c.endBatch();
  }
  void onClosed(evrdma::Connection&) noexcept override { closed = true; }
};

TEST(HostilePingPong, AClientThatNeverTakesItsEchoesIsClosedOnceAFewWaitNotLeftToGrowTheServer) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor reactor;
  pingpong::EchoFactory factory(pingsr::Limits{}, pingpong::Trace::Off, 0);
  int closed = 0;
  std::string error;
  uint64_t echoed = 0;
  factory.agentClosedHook = [&](const pingpong::EchoAgent& agent, const evrdma::Connection&) {
    ++closed;
    error = agent.error;
    echoed = agent.echoed();
  };
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);

  evrdma::ClientOptions options;
  options.maxMessageSize = 64;
  options.recvDepth = 1;
  options.sendDepth = 64;
  options.autoPostRecv = false;  // the one receive is taken by the first echo, and never given back
  auto hog = std::make_unique<EchoHog>();
  EchoHog* hogPtr = hog.get();
  evrdma::Client::Ptr client = evrdma::Client::create(reactor, std::move(hog), options);
  ASSERT_EQ(client->connect(bed.ip, listener->port(), pingsr::encode({1000, 64})), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return closed == 1 && hogPtr->closed; }, 60s));
  // iWARP has no RNR retry: the first echo that finds no receive ends the connection there (the
  // transport closes it), before any backlog can build. RoCE retries for ever: the bound ends it.
  if (!evrdma::test::onIwarp())
    EXPECT_EQ(error, "the client sent 5 messages whose echoes it has not taken (ping-sr has one message in flight)");
  else
    std::printf("[ siw      ] the transport ended the connection: \"%s\"\n", error.c_str());
  EXPECT_LE(echoed, 40u);

  // A well-behaved client afterwards: every echo back and verified.
  pingpong::PingResult result;
  bool done = false;
  evrdma::ClientOptions good;
  good.maxMessageSize = 64;
  good.recvDepth = 2;
  good.sendDepth = 2;
  client = evrdma::Client::create(
      reactor,
      std::make_unique<pingpong::PingClient>(0, pingsr::ConnectInfo{100, 64}, true, pingpong::Trace::Off,
                                             [&](const pingpong::PingResult& r) {
                                               result = r;
                                               done = true;
                                             }),
      good);
  ASSERT_EQ(client->connect(bed.ip, listener->port(), pingsr::encode({100, 64})), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return done; }, 60s));
  EXPECT_TRUE(result.succeeded) << result.error;
  EXPECT_EQ(result.roundTrips, 100u);
}

}  // namespace
