// Runs a Reactor's loop until a condition holds or a time limit passes: how the RDMA tests wait
// for what they cause, without hanging when it never comes.
#pragma once

#include <chrono>
#include <functional>

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

// No client or agent is left on `reactor` (each closed and freed).
inline bool noConnectionsLeft(const evrdma::Reactor& reactor) { return reactor.stats().connections.total() == 0; }

// Runs `reactor` until noConnectionsLeft: how a test lets the connections it dropped finish before
// it ends, instead of a fixed time. True if they did.
inline bool runUntilNoConnections(evrdma::Reactor& reactor,
                                  std::chrono::milliseconds limit = std::chrono::milliseconds(30000)) {
  return runUntil(reactor, [&] { return noConnectionsLeft(reactor); }, limit);
}

}  // namespace evrdma::test
