/// \file
/// ConnectionState: where a connection (evrdma/Connection.h) is in its life; counted per state by
/// Reactor::stats() and Listener::agentsByState().
#pragma once

#include <array>
#include <cstddef>

namespace evrdma {

enum class ConnectionState {
  Idle,            ///< created, nothing started
  ResolvingAddr,   ///< client: rdma_resolve_addr in progress
  ResolvingRoute,  ///< client: rdma_resolve_route in progress
  Connecting,      ///< client: rdma_connect sent, waiting for the answer
  Accepting,       ///< agent: rdma_accept sent, waiting for ESTABLISHED
  Established,     ///< data may flow
  Disconnecting,   ///< teardown: waiting for DISCONNECTED and flushed work requests
  Closed,          ///< final: resources released after a clean close
  Failed,          ///< final: resources released after an error
};
constexpr size_t kConnectionStates = 9;
const char* toString(ConnectionState state) noexcept;

/// How many connections are in each state, indexed by the state.
struct ConnectionCounts {
  std::array<size_t, kConnectionStates> byState{};
  size_t& operator[](ConnectionState state) noexcept { return byState[static_cast<size_t>(state)]; }
  size_t operator[](ConnectionState state) const noexcept { return byState[static_cast<size_t>(state)]; }
  size_t total() const noexcept {
    size_t sum = 0;
    for (size_t n : byState) sum += n;
    return sum;
  }
};

}  // namespace evrdma
