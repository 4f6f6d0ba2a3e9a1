// Listener, Agent and Client over real RDMA, in one process and one reactor (and, for the killed
// client, a second process): ping-sr round trips, many clients, refusals, rejections with reasons,
// close() from inside callbacks, and a peer that dies mid-run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "PingPong.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"
#include "rdma/TestBed.h"

namespace {

using namespace std::chrono_literals;
using pingpong::PingResult;

// A pingpong server and any number of clients on one reactor, in this process.
class PingPongBed : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(evrdma::test::loadTestBed(bed_));
    ASSERT_TRUE(reactor_.valid());
    factory_ = std::make_unique<pingpong::EchoFactory>(limits_, pingpong::Trace::Off, 0);
    listener_ = evrdma::Listener::create(reactor_, *factory_);
    ASSERT_EQ(listener_->listen(bed_.ip, 0), 0);
    port_ = listener_->port();
    ASSERT_NE(port_, 0);
  }

  void TearDown() override {
    if (listener_) {
      listener_.reset();
      runUntil([] { return false; }, 200ms);  // let the agents close
    }
  }

  // Runs the loop until `done()` holds (checked every few ms) or `limit` passes. True if done.
  bool runUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    bool reached = false;
    evrdma::Timer check(reactor_, [&] {
      if (done()) reached = true;
      if (reached || std::chrono::steady_clock::now() > deadline) reactor_.stop();
    });
    check.startPeriodic(2ms);
    reactor_.run();
    return reached;
  }

  // Starts a ping-sr client; its result lands in results_ when it has closed.
  evrdma::Client::Ptr& startClient(uint64_t count, size_t size, bool verify = true,
                                   std::vector<uint8_t> privateData = {}) {
    auto index = static_cast<uint32_t>(clients_.size());
    pingsr::ConnectInfo info{count, size};
    auto handler = std::make_unique<pingpong::PingClient>(index, info, verify, pingpong::Trace::Off,
                                                          [this](const PingResult& r) { results_.push_back(r); });
    evrdma::ClientOptions options;
    options.maxMessageSize = size;
    options.recvDepth = 2;
    options.sendDepth = 2;
    clients_.push_back(evrdma::Client::create(reactor_, std::move(handler), options));
    int rc = clients_.back()->connect(bed_.ip, port_, privateData.empty() ? pingsr::encode(info) : privateData);
    EXPECT_EQ(rc, 0) << strerror(-rc);
    return clients_.back();
  }

  bool allClientsDone() const { return results_.size() == clients_.size(); }

  // Starts build/demos/pingpong-client against our server in a child process.
  pid_t spawnPingClient(const std::vector<std::string>& options) {
    std::vector<std::string> args{"pingpong-client", "-a", bed_.ip, "-p", std::to_string(port_)};
    args.insert(args.end(), options.begin(), options.end());
    pid_t child = fork();
    if (child == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(PINGPONG_CLIENT_PATH, argv.data());
      _exit(127);
    }
    return child;
  }

  // Serves while the child runs; its wait status, or -1 if it outlived `limit` (then it is killed).
  int serveUntilChildExits(pid_t child, std::chrono::milliseconds limit) {
    int status = -1;
    bool exited = runUntil([&] { return waitpid(child, &status, WNOHANG) == child; }, limit);
    if (!exited) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      return -1;
    }
    return status;
  }

  evrdma::test::TestBed bed_;
  evrdma::Reactor reactor_;
  pingsr::Limits limits_;
  std::unique_ptr<pingpong::EchoFactory> factory_;
  evrdma::Listener::Ptr listener_;
  uint16_t port_ = 0;
  std::vector<evrdma::Client::Ptr> clients_;
  std::vector<PingResult> results_;
};

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
  EXPECT_EQ(factory_->agentsFailed, 0u);
}

INSTANTIATE_TEST_SUITE_P(OneByteToOneMebibyte, PingPongSizes, ::testing::Values(1, 64, 4096, 65536, 1 << 20),
                         [](const ::testing::TestParamInfo<size_t>& param) { return std::to_string(param.param) + "B"; });

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

TEST_F(PingPongBed, ClientAgainstAPortWithNoListenerGetsAClearErrorAndTheLoopGoesOn) {
  listener_.reset();  // nobody listens on port_ any more
  runUntil([] { return false; }, 50ms);
  struct Recorder : evrdma::ConnectionHandler {
    int err = 0;
    std::string op;
    bool closed = false, rejected = false;
    void onError(evrdma::Connection&, int e, const char* o) noexcept override { err = e, op = o; }
    void onRejected(evrdma::Connection&, const evrdma::RejectInfo&) noexcept override { rejected = true; }
    void onClosed(evrdma::Connection&) noexcept override { closed = true; }
  };
  auto recorder = std::make_unique<Recorder>();
  Recorder* seen = recorder.get();
  auto client = evrdma::Client::create(reactor_, std::move(recorder));
  ASSERT_EQ(client->connect(bed_.ip, port_, pingsr::encode({1, 1})), 0);
  int ticks = 0;
  evrdma::Timer heartbeat(reactor_, [&] { ++ticks; });
  heartbeat.startPeriodic(5ms);
  ASSERT_TRUE(runUntil([&] { return seen->closed; }, 30s));
  EXPECT_EQ(seen->err, -ECONNREFUSED) << seen->op;
  EXPECT_FALSE(seen->rejected);
  EXPECT_NE(seen->op.find("nobody listens"), std::string::npos) << seen->op;
  EXPECT_EQ(client->state(), evrdma::ConnectionState::Failed);
  int before = ticks;
  runUntil([] { return false; }, 50ms);
  EXPECT_GT(ticks, before) << "the loop stopped serving its other events";
  std::printf("[ figures  ] refused connect reported as: %s (%s)\n", seen->op.c_str(), strerror(-seen->err));
}

TEST_F(PingPongBed, RejectedConnectionsReportTheServersReason) {
  startClient(0, 64);                                // count 0
  startClient(5, 64, true, pingsr::encode({5, 1ull << 40}));  // data_size far over the limit
  startClient(1, 64, true, std::vector<uint8_t>(8, 0));  // short private data (IB pads it with zeros)
  ASSERT_TRUE(runUntil([&] { return allClientsDone(); }, 30s));
  ASSERT_EQ(results_.size(), 3u);
  for (const auto& r : results_) {
    EXPECT_TRUE(r.rejected) << "client " << r.index << ": " << r.error;
    EXPECT_FALSE(r.established);
    std::printf("[ figures  ] client %u %s\n", r.index, r.error.c_str());
  }
  auto reasonOf = [&](uint32_t index) {
    for (const auto& r : results_)
      if (r.index == index) return r.error;
    return std::string();
  };
  EXPECT_NE(reasonOf(0).find("count 0"), std::string::npos) << reasonOf(0);
  EXPECT_NE(reasonOf(1).find("over this server's limit"), std::string::npos) << reasonOf(1);
  EXPECT_FALSE(reasonOf(2).empty());
  EXPECT_EQ(listener_->stats().rejected, 3u);
  EXPECT_EQ(listener_->agentCount(), 0u);
}

TEST_F(PingPongBed, BadInputFailsAtOnceWithoutCallbacks) {
  struct Silent : evrdma::ConnectionHandler {
    int calls = 0;
    void onError(evrdma::Connection&, int, const char*) noexcept override { ++calls; }
    void onClosed(evrdma::Connection&) noexcept override { ++calls; }
  };
  auto handler = std::make_unique<Silent>();
  Silent* silent = handler.get();
  auto client = evrdma::Client::create(reactor_, std::move(handler));
  EXPECT_EQ(client->connect("not-an-address", port_), -EINVAL);
  EXPECT_EQ(client->connect(bed_.ip, port_, std::vector<uint8_t>(513, 1)), -EMSGSIZE);
  evrdma::ClientOptions tooBig;
  tooBig.maxMessageSize = size_t{2} << 30;
  auto oversized = evrdma::Client::create(reactor_, nullptr, tooBig);
  EXPECT_EQ(oversized->connect(bed_.ip, port_), -EINVAL);
  EXPECT_EQ(client->state(), evrdma::ConnectionState::Idle);
  EXPECT_EQ(client->postSend("x", 1), -ENOTCONN);
  runUntil([] { return false; }, 20ms);
  EXPECT_EQ(silent->calls, 0);

  pingpong::EchoFactory other(limits_, pingpong::Trace::Off, 0);
  auto second = evrdma::Listener::create(reactor_, other);
  EXPECT_EQ(second->listen(bed_.ip, port_), -EADDRINUSE);
  EXPECT_EQ(second->listen("nonsense", 1), -EINVAL);
}

TEST_F(PingPongBed, OversizedSendIsRefusedWithEmsgsize) {
  struct Oversender : evrdma::ConnectionHandler {
    int rc = 1;
    void onEstablished(evrdma::Connection& c) noexcept override {
      std::vector<uint8_t> big(c.maxMessageSize() + 1);
      rc = c.postSend(big.data(), big.size());
      c.close();
    }
  };
  auto handler = std::make_unique<Oversender>();
  Oversender* seen = handler.get();
  evrdma::ClientOptions options;
  options.maxMessageSize = 64;
  auto client = evrdma::Client::create(reactor_, std::move(handler), options);
  ASSERT_EQ(client->connect(bed_.ip, port_, pingsr::encode({1, 64})), 0);
  ASSERT_TRUE(runUntil([&] { return client->state() == evrdma::ConnectionState::Closed; }, 30s));
  EXPECT_EQ(seen->rc, -EMSGSIZE);
}

// A handler that closes its connection from inside one chosen callback, and logs every callback
// it got, in order. The log is shared: it outlives the handler, which its connection frees.
using CallLog = std::shared_ptr<std::vector<std::string>>;
struct Closer : evrdma::ConnectionHandler {
  enum When { InEstablished, InRecv, InDisconnected } when;
  CallLog calls = std::make_shared<std::vector<std::string>>();
  explicit Closer(When w) : when(w) {}
  void onEstablished(evrdma::Connection& c) noexcept override {
    calls->push_back("established");
    if (when == InEstablished) {
      c.close();
      c.close();  // twice is harmless
      return;
    }
    uint8_t byte = 7;
    c.postSend(&byte, 1);
  }
  void onRecv(evrdma::Connection& c, const uint8_t*, size_t) noexcept override {
    calls->push_back("recv");
    if (when == InRecv) c.close();
  }
  void onDisconnected(evrdma::Connection& c) noexcept override {
    calls->push_back("disconnected");
    if (when == InDisconnected) c.close();
  }
  void onError(evrdma::Connection&, int, const char* op) noexcept override { calls->push_back(std::string("error ") + op); }
  void onClosed(evrdma::Connection& c) noexcept override {
    calls->push_back("closed");
    EXPECT_EQ(c.cmId(), nullptr) << "resources must be gone before onClosed";
  }
};

bool endsClosed(const CallLog& log) { return log && !log->empty() && log->back() == "closed"; }

TEST_F(PingPongBed, CloseFromInsideOnEstablishedAndOnRecvOnTheClient) {
  for (auto when : {Closer::InEstablished, Closer::InRecv}) {
    auto handler = std::make_unique<Closer>(when);
    CallLog calls = handler->calls;
    auto client = evrdma::Client::create(reactor_, std::move(handler));
    ASSERT_EQ(client->connect(bed_.ip, port_, pingsr::encode({1, 1})), 0);
    ASSERT_TRUE(runUntil([&] { return endsClosed(calls); }, 30s));
    std::vector<std::string> expected = when == Closer::InEstablished
                                            ? std::vector<std::string>{"established", "closed"}
                                            : std::vector<std::string>{"established", "recv", "closed"};
    EXPECT_EQ(*calls, expected);
    EXPECT_EQ(client->state(), evrdma::ConnectionState::Closed);
  }
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 0; }, 10s)) << "agents outlived their clients";
}

// The server side closes from inside its callbacks; the client sees the disconnect.
class ClosingAgents : public evrdma::AgentFactory {
 public:
  explicit ClosingAgents(Closer::When when) : when_(when) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    auto closer = std::make_unique<Closer>(when_);
    lastCalls = closer->calls;
    return evrdma::AcceptDecision::accept(std::move(closer));
  }
  CallLog lastCalls;

 private:
  Closer::When when_;
};

TEST_F(PingPongBed, CloseFromInsideOnEstablishedOnRecvAndOnDisconnectedOnTheAgent) {
  for (auto when : {Closer::InEstablished, Closer::InRecv, Closer::InDisconnected}) {
    ClosingAgents factory(when);
    auto listener = evrdma::Listener::create(reactor_, factory);
    ASSERT_EQ(listener->listen(bed_.ip, 0), 0);
    // Both sides send one byte once established; the client closes when the agent's byte arrives,
    // which is what the agent sees as the disconnect in the InDisconnected case.
    auto clientHandler = std::make_unique<Closer>(Closer::InRecv);
    CallLog clientCalls = clientHandler->calls;
    auto client = evrdma::Client::create(reactor_, std::move(clientHandler));
    ASSERT_EQ(client->connect(bed_.ip, listener->port()), 0);
    ASSERT_TRUE(runUntil([&] { return factory.lastCalls && listener->agentCount() == 0; }, 30s))
        << "agent never freed (case " << static_cast<int>(when) << ")";
    const auto& calls = *factory.lastCalls;
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(calls.front(), "established");
    EXPECT_EQ(calls.back(), "closed");
    EXPECT_EQ(std::count(calls.begin(), calls.end(), "closed"), 1);
    if (when == Closer::InDisconnected) {
      EXPECT_NE(std::find(calls.begin(), calls.end(), "disconnected"), calls.end());
    }
    ASSERT_TRUE(runUntil([&] { return endsClosed(clientCalls); }, 30s));
  }
}

TEST_F(PingPongBed, DroppingTheClientPointerInsideACallbackIsSafe) {
  struct Dropper : evrdma::ConnectionHandler {
    evrdma::Client::Ptr* owner = nullptr;
    bool* closed = nullptr;
    void onEstablished(evrdma::Connection&) noexcept override { owner->reset(); }  // frees the client later
    void onClosed(evrdma::Connection&) noexcept override { *closed = true; }
  };
  bool closed = false;
  auto handler = std::make_unique<Dropper>();
  Dropper* dropper = handler.get();
  evrdma::Client::Ptr client = evrdma::Client::create(reactor_, std::move(handler));
  dropper->owner = &client;
  dropper->closed = &closed;
  ASSERT_EQ(client->connect(bed_.ip, port_, pingsr::encode({1, 1})), 0);
  ASSERT_TRUE(runUntil([&] { return closed; }, 30s));
  EXPECT_EQ(client, nullptr);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 0; }, 10s));
}

TEST_F(PingPongBed, AClientKilledMidRunLeavesTheServerServingTheOthers) {
  // A second process, killed with SIGKILL while it ping-pongs; its kernel resources die with it.
  pid_t child = spawnPingClient({"-c", "100000000", "-s", "64"});
  ASSERT_GT(child, 0);
  ASSERT_TRUE(runUntil([&] { return listener_->agentCount() == 1; }, 30s)) << "the child never connected";
  runUntil([] { return false; }, 100ms);  // the child ping-pongs meanwhile
  for (int i = 0; i < 8; ++i) startClient(200, 256);
  runUntil([] { return false; }, 30ms);  // let them get going, then kill the child
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  ASSERT_TRUE(runUntil([&] { return allClientsDone() && listener_->agentCount() == 0; }, 60s))
      << "agents left: " << listener_->agentCount() << ", clients done: " << results_.size();
  for (const auto& r : results_) EXPECT_TRUE(r.succeeded) << "client " << r.index << ": " << r.error;
  EXPECT_EQ(factory_->agentsServed, 9u);
  EXPECT_EQ(factory_->agentsFailed, 1u) << "the dead client's agent should end early";
  std::printf("[ figures  ] killed client: agent freed; 8 other clients verified; %llu echoes in all\n",
              static_cast<unsigned long long>(factory_->totalEchoes));
}

}  // namespace
