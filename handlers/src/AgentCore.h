// AgentCore: the agent's role behind an Agent: accepting the connect request it was made from
// (its accept timeout), and telling its owner (an AgentHome) when it is established or finished.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "ConnectionCore.h"

namespace evrdma {

class Agent;

namespace detail {
class AgentOwner;
}

class AgentCore final : public ConnectionCore {
 public:
  AgentCore(detail::AgentOwner& owner, Reactor& reactor, std::unique_ptr<ConnectionHandler> handler,
            const ConnectionOptions& options, std::chrono::milliseconds acceptTimeout,
            std::chrono::milliseconds helloTimeout);

  // Takes the request's id, sets up verbs (in `prepared`'s memory where it holds some) and
  // accepts. Returns 0, or -errno with `op` set (its owner then rejects the request).
  int accept(CmId id, const std::vector<uint8_t>& privateData, const char*& op,
             detail::PreparedMappings* prepared) noexcept;
  Agent& agent() const noexcept;

  // The memory counted against ListenerOptions::maxUnestablishedMemory until it is established
  // or ends (the owner's to count).
  uint64_t unestablishedBytes = 0;
  // Connected, its hello awaited (the owner's to keep, in its list of silent agents, oldest first).
  bool silent = false;
  std::chrono::steady_clock::time_point silentSince{};
  std::list<Agent*>::iterator silentEntry{};

 private:
  void onConnectRejected(const CmEvent& event) noexcept override;
  void onConnectFailed(const CmEvent& event) noexcept override;
  void onEstablishedByRole() noexcept override;
  void onAwaitingHello() noexcept override;
  void onFinished() noexcept override;

  detail::AgentOwner& owner_;
  std::chrono::milliseconds acceptTimeout_;
  std::chrono::milliseconds helloTimeout_;
  // Bounds the wait for the client: until acceptDeadline_ to complete the connection, then (when
  // that comes first) helloTimeout for its hello (waitsForHello_).
  Timer waitTimer_;
  std::chrono::steady_clock::time_point acceptDeadline_{};
  bool waitsForHello_ = false;
};

// The role behind an Agent.
AgentCore& coreOf(Agent& agent) noexcept;

}  // namespace evrdma
