// AgentSet: the agents a Listener owns on its own Reactor (not those on its workers), and the
// figures of those gone: counts by state and ConnectionStats summed over every agent it has had.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>

#include "evrdma/Agent.h"
#include "evrdma/ConnectionState.h"
#include "evrdma/Listener.h"

namespace evrdma::detail {

class AgentSet {
 public:
  Agent* add(std::unique_ptr<Agent> agent);
  void erase(Agent* agent) noexcept { agents_.erase(agent); }
  // Frees them all at once (the Reactor is gone: they close without callbacks).
  void clear() noexcept { agents_.clear(); }
  size_t size() const noexcept { return agents_.size(); }
  bool empty() const noexcept { return agents_.empty(); }

  // Each once, in no particular order; `fn` may close() one (it goes on a later turn).
  void forEach(const std::function<void(Agent&)>& fn) const;
  // The next `most` after `walk`, in the map's order (by address: fixed while they live).
  size_t forEachFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const;
  void closeAll() noexcept;
  ConnectionCounts byState() const noexcept;
  // An agent finished: its figures join those of the agents gone, and `stats` counts it (closed,
  // failed, timed out).
  void noteFinished(const Agent& agent, ListenerStats& stats) noexcept;
  // Every agent's ConnectionStats, the finished ones included, summed.
  ConnectionStats totals() const noexcept;

 private:
  std::map<Agent*, std::unique_ptr<Agent>> agents_;
  ConnectionStats closedTotals_;
};

}  // namespace evrdma::detail
