// What embedded-server shows over HTTP, made from evrdma's snapshots (nothing counted by hand):
// GET /metrics in the Prometheus text exposition format (version 0.0.4), GET /agents as JSON.
#pragma once

#include <cstdint>
#include <string>

#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

namespace embedded {

// The application's own figures, shown beside evrdma's.
struct AppFigures {
  uint64_t httpRequests = 0;
  uint64_t ticks = 0;
  double uptimeSeconds = 0;
};

// `listenerLabel` names the listener ("address:port").
std::string prometheusText(const evrdma::Reactor& reactor, const evrdma::Listener& listener,
                           const std::string& listenerLabel, const AppFigures& app);
// One object per agent: peer, state, age_ms, messages and bytes each way, backlog, credits.
std::string agentsJson(const evrdma::Listener& listener);

}  // namespace embedded
