// Runs a Reactor's loop until a condition holds or a time limit passes: how the RDMA tests wait
// for what they cause, without hanging when it never comes.
#pragma once

#include <event2/event.h>

#include <chrono>
#include <functional>
#include <vector>

#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace evrdma::test {

// Runs `reactor` until `done()` holds (checked every 2 ms) or `limit` passes. True if done.
inline bool runUntil(evrdma::Reactor& reactor, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool reached = false;
  evrdma::Timer check(reactor, [&] {
    if (done()) reached = true;
    if (reached || std::chrono::steady_clock::now() > deadline) reactor.stop();
  });
  check.startPeriodic(std::chrono::milliseconds(2));
  reactor.run();
  return reached;
}

// Runs the loops of `reactors` in turn, each without blocking, until `done()` holds or `limit`
// passes: how a test runs Reactors that share its thread, or keeps one of them standing still.
inline bool spinUntil(const std::vector<evrdma::Reactor*>& reactors, std::chrono::milliseconds limit,
                      const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    for (evrdma::Reactor* reactor : reactors) event_base_loop(reactor->base(), EVLOOP_NONBLOCK);
    if (done()) return true;
  }
  return done();
}

// No client or agent is left on `reactor` (each closed and freed).
inline bool noConnectionsLeft(const evrdma::Reactor& reactor) { return reactor.stats().connections.total() == 0; }

// Runs `reactor` until noConnectionsLeft: how a test lets the connections it dropped finish before
// it ends, instead of a fixed time. True if they did.
inline bool runUntilNoConnections(evrdma::Reactor& reactor,
                                  std::chrono::milliseconds limit = std::chrono::milliseconds(30000)) {
  return runUntil(reactor, [&] { return noConnectionsLeft(reactor); }, limit);
}

}  // namespace evrdma::test
