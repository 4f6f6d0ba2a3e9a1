// A test bed for connection tests: a pingpong server (Listener + EchoFactory) on the RDMA device of
// tools/rdma-run, clients on the same reactor or in child processes, and a bounded loop runner.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
#include "rdma/RunUntil.h"
#include "rdma/TestBed.h"

namespace evrdma::test {

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
    // Close everything while the fixture (which the handlers report into) is still whole.
    clients_.clear();
    listener_.reset();
    EXPECT_TRUE(runUntilNoConnections(reactor_)) << "connections left open after the test";
  }

  // Runs the loop until `done()` holds (checked every few ms) or `limit` passes. True if done.
  bool runUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    return evrdma::test::runUntil(reactor_, done, limit);
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
  bool everyClientMadeARoundTrip() const {
    for (const auto& c : clients_)
      if (static_cast<const pingpong::PingClient&>(c->handler()).result().roundTrips == 0) return false;
    return true;
  }

  // A listener of its own with `factory`, and a client with `handler` connecting to it.
  struct Pair {
    evrdma::Listener::Ptr listener;
    evrdma::Client::Ptr client;
  };
  Pair listenAndConnect(evrdma::AgentFactory& factory, std::unique_ptr<evrdma::ConnectionHandler> handler,
                        const evrdma::ClientOptions& options) {
    Pair pair;
    pair.listener = evrdma::Listener::create(reactor_, factory);
    EXPECT_EQ(pair.listener->listen(bed_.ip, 0), 0);
    pair.client = evrdma::Client::create(reactor_, std::move(handler), options);
    EXPECT_EQ(pair.client->connect(bed_.ip, pair.listener->port()), 0);
    return pair;
  }

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
      kill(child, SIGUSR1);  // a pingpong-client prints where each of its connections stands
      runUntil([] { return false; }, std::chrono::milliseconds(1000));
      // Where it hangs: the kernel stack of each of its threads (the guest runs as root).
      const std::string task = "/proc/" + std::to_string(child) + "/task";
      std::string cmd = "for t in " + task + "/*; do echo \"== child " + std::to_string(child) +
                        " thread $(basename $t): $(cat $t/wchan 2>/dev/null)\"; cat $t/stack 2>/dev/null; done >&2";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not read the child's stacks\n");
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

}  // namespace evrdma::test
