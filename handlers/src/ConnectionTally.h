// ConnectionTally: what a connection counts of itself, kept so that a group of thousands (a
// Listener's agents) is counted without a walk over them: its figures (ConnectionStats), each also
// added to its group's totals as it is counted, and the counts by state its state moves between
// (its Reactor's and its group's). /metrics walked every agent three times to count them: 114 ms
// at 25 000 agents in the test bed, one long loop turn.
#pragma once

#include <cstdint>

#include "evrdma/ConnectionOptions.h"
#include "evrdma/ConnectionState.h"

namespace evrdma::detail {

struct ConnectionTally {
  ConnectionStats own;
  ConnectionStats* groupStats = nullptr;    // its group's totals (null: in none)
  ConnectionCounts* groupCounts = nullptr;  // its group's counts by state

  void add(uint64_t ConnectionStats::*field, uint64_t n = 1) noexcept {
    own.*field += n;
    if (groupStats != nullptr) groupStats->*field += n;
  }
};

// A connection's state moved from `before` to `after` in `counts`.
inline void moveCount(ConnectionCounts& counts, ConnectionState before, ConnectionState after) noexcept {
  --counts[before];
  ++counts[after];
}

}  // namespace evrdma::detail
