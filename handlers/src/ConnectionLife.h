// ConnectionLife: the one state of a connection's whole life. The CM state machine moves it
// through the open phases (ConnectionCore and its roles), ConnectionTeardown through the closing
// ones, forward only; the public ConnectionState is derived from it in one place (publicState).
// Whether the end is Closed or Failed is the outcome the teardown records, not a phase.
#pragma once

#include <cstdint>

#include "evrdma/ConnectionState.h"

namespace evrdma::detail {

enum class Life : uint8_t {
  // Open: no close() yet, no failure.
  Idle,            // created, nothing started
  ResolvingAddr,   // client: rdma_resolve_addr in progress
  ResolvingRoute,  // client: rdma_resolve_route in progress
  Connecting,      // client: rdma_connect sent
  Accepting,       // agent: rdma_accept sent
  Established,     // data may flow
  // Closing (ConnectionTeardown): never back to an open phase.
  AwaitingEstablished,  // an agent closing before the CM said ESTABLISHED: rdma_disconnect once it does
  Disconnecting,        // waiting for DISCONNECTED and every posted request flushed back
  FinishScheduled,      // all back (or disconnectTimeout ran out): the finish on a later turn
  // Ended: every resource released.
  Finished,  // onClosed called
  Orphaned,  // the Reactor went first: released without a word to the application
};

constexpr bool isClosing(Life life) noexcept { return life >= Life::AwaitingEstablished; }
constexpr bool hasEnded(Life life) noexcept { return life >= Life::Finished; }

// What Connection::state() and the Reactor's counts say of a connection in `life`; `failed`:
// it ended, or is ending, because of an error.
constexpr ConnectionState publicState(Life life, bool failed) noexcept {
  switch (life) {
    case Life::Idle: return ConnectionState::Idle;
    case Life::ResolvingAddr: return ConnectionState::ResolvingAddr;
    case Life::ResolvingRoute: return ConnectionState::ResolvingRoute;
    case Life::Connecting: return ConnectionState::Connecting;
    case Life::Accepting: return ConnectionState::Accepting;
    case Life::Established: return ConnectionState::Established;
    case Life::AwaitingEstablished:
    case Life::Disconnecting:
    case Life::FinishScheduled: return ConnectionState::Disconnecting;
    case Life::Finished:
    case Life::Orphaned: break;
  }
  return failed ? ConnectionState::Failed : ConnectionState::Closed;
}

}  // namespace evrdma::detail
