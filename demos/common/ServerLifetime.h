// How a demo server ends: shutdown() closes the listener, which closes every agent, and the loop
// stops once the last agent has reported onClosed. SIGINT and SIGTERM start it, and so does
// serving the -e N-th client. Shared by pingpong-server and blast-server.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace pingpong {

class ServerLifetime {
 public:
  // `activeAgents`: the factory's count of agents not yet closed (read on the loop's thread; with
  // workers it is updated on theirs).
  ServerLifetime(const char* program, evrdma::Reactor& reactor, evrdma::Listener& listener,
                 const std::atomic<size_t>& activeAgents)
      : program_(program),
        reactor_(reactor),
        listener_(listener),
        activeAgents_(activeAgents),
        onInt_(reactor, SIGINT, [this](int signo) { onSignal(signo); }),
        onTerm_(reactor, SIGTERM, [this](int signo) { onSignal(signo); }) {}

  // A temporary count (e.g. converted from a plain size_t) would dangle.
  ServerLifetime(const char*, evrdma::Reactor&, evrdma::Listener&, const std::atomic<size_t>&&) = delete;

  void shutdown() {
    if (stopping_) return;
    stopping_ = true;
    listener_.close();
    if (activeAgents_ == 0) reactor_.stop();
  }
  // From the factory's agent-closed hook, once its counters are up to date (on the loop's thread:
  // with workers, post it there).
  void agentClosed(uint64_t served, uint64_t exitAfter) {
    if (stopping_ && activeAgents_ == 0) reactor_.stop();
    if (exitAfter != 0 && served >= exitAfter) shutdown();
  }
  // Clients cut short by a signal are a clean shutdown.
  bool stoppedBySignal() const { return stoppedBySignal_; }

 private:
  void onSignal(int signo) {
    std::printf("%s: %s: closing %zu connections\n", program_, strsignal(signo), activeAgents_.load());
    std::fflush(stdout);
    stoppedBySignal_ = true;
    shutdown();
  }

  const char* program_;
  evrdma::Reactor& reactor_;
  evrdma::Listener& listener_;
  const std::atomic<size_t>& activeAgents_;
  bool stopping_ = false, stoppedBySignal_ = false;
  evrdma::SignalWatch onInt_, onTerm_;
};

}  // namespace pingpong
