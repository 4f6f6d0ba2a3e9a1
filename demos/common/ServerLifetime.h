// How a demo server ends: shutdown() closes the listener, which closes every agent, and the loop
// stops once the last agent has reported onClosed. SIGINT and SIGTERM start it, and so does
// serving the -e N-th client. And how it outlives its device: when the listener loses it
// (onListenerError -ENODEV), it listens again on the same address and port once the device is
// back. Shared by pingpong-server and blast-server.
#pragma once

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

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
        onTerm_(reactor, SIGTERM, [this](int signo) { onSignal(signo); }),
        relisten_(reactor, [this] { tryListening(); }) {}

  // A temporary count (e.g. converted from a plain size_t) would dangle.
  ServerLifetime(const char*, evrdma::Reactor&, evrdma::Listener&, const std::atomic<size_t>&&) = delete;

  void shutdown() {
    if (stopping_) return;
    stopping_ = true;
    relisten_.cancel();
    listener_.close();
    if (activeAgents_ == 0) reactor_.stop();
  }
  // From the factory's agent-closed hook, once its counters are up to date (on the loop's thread:
  // with workers, post it there).
  void agentClosed(uint64_t served, uint64_t exitAfter) {
    if (stopping_ && activeAgents_ == 0) reactor_.stop();
    if (exitAfter != 0 && served >= exitAfter) shutdown();
  }
  // Once listening: where to listen again after the device went away.
  void listening(std::string address, uint16_t port, int backlog) {
    address_ = std::move(address);
    port_ = port;
    backlog_ = backlog;
  }
  // From the factory's onListenerError: the listener stopped. After a device removal it tries
  // again every half second until the device (and its address) is back.
  void listenerFailed(int err) {
    if (err != -ENODEV || stopping_ || address_.empty()) return;
    std::printf("%s: the device went away: listening again on %s port %u once it is back\n", program_,
                address_.c_str(), port_);
    std::fflush(stdout);
    relisten_.startPeriodic(std::chrono::milliseconds(500));
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

  void tryListening() {
    if (stopping_) return;
    const int rc = listener_.listen(address_, port_, backlog_);
    if (rc != 0) return;  // not back yet (-EADDRNOTAVAIL, -ENODEV)
    relisten_.cancel();
    std::printf("%s: listening again on %s port %u\n", program_, address_.c_str(), listener_.port());
    std::fflush(stdout);
  }

  const char* program_;
  evrdma::Reactor& reactor_;
  evrdma::Listener& listener_;
  const std::atomic<size_t>& activeAgents_;
  bool stopping_ = false, stoppedBySignal_ = false;
  evrdma::SignalWatch onInt_, onTerm_;
  evrdma::Timer relisten_;
  std::string address_;
  uint16_t port_ = 0;
  int backlog_ = 0;
};

}  // namespace pingpong
