// What a demo server shows over HTTP (embedded-server, pingpong-server -H), made from evrdma's
// snapshots (nothing counted by hand): GET /metrics in the Prometheus text exposition format
// (version 0.0.4), GET /agents as JSON.
#pragma once

#include <cstdint>
#include <string>

#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

namespace embedded {

// The application's own figures, shown beside evrdma's.
struct AppFigures {
  const char* program = "embedded_server";  // the prefix of these figures' names
  uint64_t httpRequests = 0;
  uint64_t ticks = 0;
  double uptimeSeconds = 0;
};

// `listenerLabel` names the listener ("address:port"); `sendBacklog`: the agents' send backlogs
// summed (the one figure that takes a walk over them: replyMetrics takes it a slice a turn).
std::string prometheusText(const evrdma::Reactor& reactor, const evrdma::Listener& listener,
                           const std::string& listenerLabel, const AppFigures& app, uint64_t sendBacklog);
// One object per agent: peer, state, age_ms, messages and bytes each way, backlog, credits.
std::string agentsJson(const evrdma::Listener& listener);
// The objects of agentsJson for the next `most` agents of `walk` (Listener::forEachAgentFrom),
// each after a comma but the walk's first.
std::string agentsJsonSlice(const evrdma::Listener& listener, evrdma::AgentWalk& walk, size_t most);

}  // namespace embedded
