// AgentSet: the agents a Listener owns on its own Reactor (not those on its workers), their counts
// by state and their ConnectionStats summed over every agent it has had, both kept by the agents
// as they count (ConnectionTally): answered without a walk over them.
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
  ConnectionCounts byState() const noexcept { return counts_; }
  // An agent finished: `stats` counts it (closed, failed, timed out).
  void noteFinished(const Agent& agent, ListenerStats& stats) noexcept;
  // Every agent's ConnectionStats, the finished ones included, summed.
  ConnectionStats totals() const noexcept { return totals_; }

 private:
  // Before the agents: each counts itself out of them as it goes.
  ConnectionCounts counts_;
  ConnectionStats totals_;
  std::map<Agent*, std::unique_ptr<Agent>> agents_;
};

}  // namespace evrdma::detail
