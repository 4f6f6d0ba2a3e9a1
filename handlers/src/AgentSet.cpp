// AgentSet: a Listener's own agents and their figures.
#include "AgentSet.h"

#include <cerrno>

#include "AgentCore.h"

namespace evrdma::detail {

Agent* AgentSet::add(std::unique_ptr<Agent> agent) {
  Agent* added = agent.get();
  agents_.emplace(added, std::move(agent));
  coreOf(*added).joinGroup(counts_, totals_);
  return added;
}

void AgentSet::noteFinished(const Agent& agent, ListenerStats& stats) noexcept {
  ++stats.agentsClosed;
  if (agent.error() != 0) ++stats.agentsFailed;
  if (agent.error() == -ETIMEDOUT) ++stats.agentsTimedOut;
}

void AgentSet::forEach(const std::function<void(Agent&)>& fn) const {
  for (const auto& [agent, owned] : agents_) fn(*agent);
}

size_t AgentSet::forEachFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const {
  // A cursor, not an iterator: the agent it names may be gone by the next call. Only compared.
  auto next = walk.after == 0 ? agents_.begin() : agents_.upper_bound(reinterpret_cast<Agent*>(walk.after));
  size_t visited = 0;
  for (; visited < most && next != agents_.end(); ++visited) {
    Agent* agent = next->first;
    walk.after = reinterpret_cast<uintptr_t>(agent);
    ++next;  // before fn: a close is deferred, but the iterator need not outlive it
    fn(*agent);
  }
  // Looked up again rather than kept: right whatever `fn` did.
  walk.done = (walk.after == 0 ? agents_.begin() : agents_.upper_bound(reinterpret_cast<Agent*>(walk.after))) ==
              agents_.end();
  return visited;
}

void AgentSet::closeAll() noexcept {
  for (auto& [agent, owned] : agents_) agent->close();
}


}  // namespace evrdma::detail
