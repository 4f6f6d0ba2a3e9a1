// AgentOwner: what an Agent tells whoever set it up and owns it (an AgentHome: a Listener's, or
// one on a worker Reactor), so that the Agent never reaches up into the Listener.
#pragma once

namespace evrdma {
class Agent;
}

namespace evrdma::detail {

class AgentOwner {
 public:
  // The client refused our accept (its connect timed out before the accept reached it).
  virtual void agentAbandoned(Agent& agent) noexcept = 0;
  // The agent was established, or ended: its memory no longer counts as unestablished (and it is
  // silent no more).
  virtual void releaseUnestablished(Agent& agent) noexcept = 0;
  // A framed agent's client completed the connection; its hello is awaited.
  virtual void agentSilent(Agent& agent) noexcept = 0;
  // It said none within helloTimeout: the owner counts it, and closes it.
  virtual void agentSilentTooLong(Agent& agent) noexcept = 0;
  // From the agent's own finish(), after onClosed: the owner frees it on a later turn.
  virtual void agentFinished(Agent& agent) noexcept = 0;

 protected:
  ~AgentOwner() = default;
};

}  // namespace evrdma::detail
