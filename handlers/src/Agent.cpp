// Agent: the API of the passive side, over its AgentCore (which the Listener's AgentHome makes).
#include "evrdma/Agent.h"

#include "AgentCore.h"

namespace evrdma {

Agent::Agent(std::unique_ptr<AgentCore> core) noexcept : Connection(std::move(core)) {}

}  // namespace evrdma
