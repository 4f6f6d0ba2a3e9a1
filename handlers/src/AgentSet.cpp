// AgentSet: a Listener's own agents and their figures.
#include "AgentSet.h"

#include <cerrno>

namespace evrdma::detail {

Agent* AgentSet::add(std::unique_ptr<Agent> agent) {
  Agent* added = agent.get();
  agents_.emplace(added, std::move(agent));
  return added;
}

void AgentSet::noteFinished(const Agent& agent, ListenerStats& stats) noexcept {
  closedTotals_ += agent.stats();
  ++stats.agentsClosed;
  if (agent.error() != 0) ++stats.agentsFailed;
  if (agent.error() == -ETIMEDOUT) ++stats.agentsTimedOut;
}

void AgentSet::forEach(const std::function<void(Agent&)>& fn) const {
  for (const auto& [agent, owned] : agents_) fn(*agent);
}

void AgentSet::closeAll() noexcept {
  for (auto& [agent, owned] : agents_) agent->close();
}

ConnectionCounts AgentSet::byState() const noexcept {
  ConnectionCounts counts;
  for (const auto& [agent, owned] : agents_) ++counts[agent->state()];
  return counts;
}

ConnectionStats AgentSet::totals() const noexcept {
  ConnectionStats totals = closedTotals_;
  for (const auto& [agent, owned] : agents_)
    if (agent->state() != ConnectionState::Closed && agent->state() != ConnectionState::Failed)
      totals += agent->stats();  // a finished agent's are in closedTotals_ already
  return totals;
}

}  // namespace evrdma::detail
