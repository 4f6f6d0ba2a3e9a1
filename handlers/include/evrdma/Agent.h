/// \file
/// Agent: the passive side of one connection, made by a Listener from a connect request its
/// factory accepted. Owned by the Listener (or, with ListenerOptions::workers, by its part on the
/// worker that runs it), which frees it after onClosed.
#pragma once

#include <chrono>
#include <memory>

#include "evrdma/Connection.h"
#include "evrdma/Watch.h"

namespace evrdma {

namespace detail {
class AgentHome;
class AgentOwner;
}  // namespace detail

class Agent : public Connection {
 private:
  friend class detail::AgentHome;
  Agent(detail::AgentOwner& owner, Reactor& reactor, std::unique_ptr<ConnectionHandler> handler,
        const ConnectionOptions& options, std::chrono::milliseconds acceptTimeout);
  /// Takes the request's id, sets up verbs (in `prepared`'s memory where it holds some) and
  /// accepts. Returns 0, or -errno with `op` set (its owner then rejects the request).
  int accept(CmId id, const std::vector<uint8_t>& privateData, const char*& op,
             detail::PreparedMappings* prepared) noexcept;
  void onConnectRejected(const CmEvent& event) noexcept override;
  void onConnectFailed(const CmEvent& event) noexcept override;
  void onEstablishedByRole() noexcept override;
  void onFinished() noexcept override;

  detail::AgentOwner& owner_;
  /// The memory counted against ListenerOptions::maxUnestablishedMemory until it is established
  /// or ends.
  uint64_t unestablishedBytes_ = 0;
  std::chrono::milliseconds acceptTimeout_;
  Timer acceptTimer_;
};

}  // namespace evrdma
