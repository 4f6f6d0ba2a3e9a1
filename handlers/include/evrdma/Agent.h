/// \file
/// Agent: the passive side of one connection, made by a Listener from a connect request its
/// factory accepted. Owned by the Listener (or, with ListenerOptions::workers, by its part on the
/// worker that runs it), which frees it after onClosed.
#pragma once

#include <memory>

#include "evrdma/Connection.h"

namespace evrdma {

class AgentCore;

class Agent : public Connection {
 public:
  /// Made by a Listener only: an AgentCore is evrdma's own (opaque here).
  explicit Agent(std::unique_ptr<AgentCore> core) noexcept;
};

}  // namespace evrdma
