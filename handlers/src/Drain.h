// Drain: a Listener's graceful shutdown once it stopped listening: the grace its agents get, the
// close of those still open after it, and the `drained` callback, on a later loop turn, once the
// last agent is gone (agents on workers counted every few milliseconds, as they close on their
// own threads).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "evrdma/Watch.h"

namespace evrdma {
class Reactor;
}

namespace evrdma::detail {

class Drain {
 public:
  // `agentCount`: the agents left, workers' included; `closeAgents`: closes them all;
  // `hasWorkers`: whether agents on other threads must be counted by polling.
  Drain(Reactor& reactor, std::function<size_t()> agentCount, std::function<void()> closeAgents,
        std::function<bool()> hasWorkers)
      : reactor_(reactor),
        agentCount_(std::move(agentCount)),
        closeAgents_(std::move(closeAgents)),
        hasWorkers_(std::move(hasWorkers)) {}

  bool active() const noexcept { return active_; }
  // Begins (true: the first call, the caller stops listening) or shortens the grace; `drained`,
  // if set, replaces the callback.
  bool start(std::chrono::milliseconds grace, std::function<void()> drained);
  // Closes the agents once the grace is over, calls back if none is left, and looks again later.
  void tick() noexcept;
  // An agent ended: calls back (on a later turn) if it was the last.
  void maybeDone() noexcept;
  // The Reactor is gone: no timer, no callback.
  void forget() noexcept;

 private:
  Reactor& reactor_;
  std::function<size_t()> agentCount_;
  std::function<void()> closeAgents_;
  std::function<bool()> hasWorkers_;
  bool active_ = false;
  std::chrono::steady_clock::time_point deadline_;
  bool closedAgents_ = false;  // the grace ran out: every agent was closed
  std::function<void()> drained_;
  std::unique_ptr<Timer> timer_;
};

}  // namespace evrdma::detail
