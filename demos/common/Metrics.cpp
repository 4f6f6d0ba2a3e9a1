// A demo server's /metrics (Prometheus text) and /agents (JSON) pages, written from the Reactor's
// and the Listener's snapshots (Metrics.h).
#include "Metrics.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "Json.h"
#include "evrdma/Agent.h"

namespace embedded {
namespace {

// Builds the exposition text: each family's HELP and TYPE once, then its samples.
class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", value);
    sample(name, labels, std::string(number));
  }
  void sample(const std::string& name, const std::string& labels, uint64_t value) {
    sample(name, labels, std::to_string(value));
  }
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += ' ' + value + '\n';
  }
  // A counter family with one sample.
  void counter(const char* name, const char* help, const std::string& labels, uint64_t value) {
    family(name, "counter", help);
    sample(name, labels, value);
  }
  void gauge(const char* name, const char* help, const std::string& labels, double value) {
    family(name, "gauge", help);
    sample(name, labels, value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// A label value, escaped as the format wants (backslash, double quote, newline).
std::string quoted(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string label(const char* key, const std::string& value) { return std::string(key) + "=" + quoted(value); }

constexpr evrdma::ConnectionState kStates[] = {
    evrdma::ConnectionState::Idle,        evrdma::ConnectionState::ResolvingAddr, evrdma::ConnectionState::ResolvingRoute,
    evrdma::ConnectionState::Connecting,  evrdma::ConnectionState::Accepting,     evrdma::ConnectionState::Established,
    evrdma::ConnectionState::Disconnecting, evrdma::ConnectionState::Closed,      evrdma::ConnectionState::Failed};

void byState(Exposition& e, const char* name, const std::string& base, const evrdma::ConnectionCounts& counts) {
  for (evrdma::ConnectionState state : kStates)
    e.sample(name, base + "," + label("state", evrdma::toString(state)), static_cast<uint64_t>(counts[state]));
}

void listenerFigures(Exposition& e, const evrdma::Listener& listener, const std::string& at, uint64_t sendBacklog) {
  const std::string l = label("listener", at);
  const evrdma::ListenerStats& s = listener.stats();
  e.counter("evrdma_listener_requests_total", "Connect requests that reached the listener.", l, s.requests);
  e.counter("evrdma_listener_accepted_total", "Connect requests accepted.", l, s.accepted);
  e.family("evrdma_listener_rejected_total", "counter", "Connect requests rejected, by reason.");
  e.sample("evrdma_listener_rejected_total", l + "," + label("reason", "busy"), s.rejectedBusy);
  e.sample("evrdma_listener_rejected_total", l + "," + label("reason", "waiting"), s.rejectedWaiting);
  e.sample("evrdma_listener_rejected_total", l + "," + label("reason", "factory"), s.rejectedByFactory);
  e.sample("evrdma_listener_rejected_total", l + "," + label("reason", "setup"), s.rejectedSetup);
  e.sample("evrdma_listener_rejected_total", l + "," + label("reason", "closing"), s.rejectedClosing);
  e.counter("evrdma_listener_abandoned_total", "Requests whose client gave up before they were answered.", l,
            s.abandoned);
  e.counter("evrdma_listener_held_for_later_turn_total", "Requests answered on a later loop turn (acceptsPerTurn).",
            l, s.heldForLaterTurn);
  e.counter("evrdma_listener_agents_closed_total", "Agents that have closed.", l, s.agentsClosed);
  e.counter("evrdma_listener_agents_failed_total", "Agents that ended with an error.", l, s.agentsFailed);
  e.counter("evrdma_listener_agents_timed_out_total", "Agents that ended with ETIMEDOUT (accept, keepalive, idle).",
            l, s.agentsTimedOut);
  e.family("evrdma_listener_agents", "gauge", "Agents now, by connection state.");
  byState(e, "evrdma_listener_agents", l, listener.agentsByState());
  e.gauge("evrdma_listener_draining", "1 while the listener drains (graceful shutdown).", l,
          listener.draining() ? 1 : 0);

  const evrdma::ConnectionStats t = listener.agentTotals();
  e.family("evrdma_listener_messages_total", "counter", "Messages of every agent, closed ones included.");
  e.sample("evrdma_listener_messages_total", l + "," + label("direction", "received"), t.messagesReceived);
  e.sample("evrdma_listener_messages_total", l + "," + label("direction", "sent"), t.messagesSent);
  e.family("evrdma_listener_bytes_total", "counter", "Message bytes of every agent, closed ones included.");
  e.sample("evrdma_listener_bytes_total", l + "," + label("direction", "received"), t.bytesReceived);
  e.sample("evrdma_listener_bytes_total", l + "," + label("direction", "sent"), t.bytesSent);
  e.counter("evrdma_listener_credit_waits_total", "Times a message waited for the peer's credits.", l, t.creditWaits);
  e.counter("evrdma_listener_credit_frames_sent_total", "Credit-only frames sent.", l, t.creditFramesSent);
  e.counter("evrdma_listener_keepalive_probes_sent_total", "Keepalive probes sent to silent peers.", l,
            t.keepaliveProbesSent);
  e.counter("evrdma_listener_keepalive_replies_sent_total", "Answers to the peers' keepalive probes.", l,
            t.keepaliveRepliesSent);
  e.gauge("evrdma_listener_send_backlog", "Requests of the agents waiting for room or credits.", l,
          static_cast<double>(sendBacklog));
}

void reactorFigures(Exposition& e, const evrdma::ReactorStats& r) {
  const std::string l = label("reactor", "main");
  e.family("evrdma_reactor_connections", "gauge", "Clients and agents on the reactor, by connection state.");
  byState(e, "evrdma_reactor_connections", l, r.connections);
  e.family("evrdma_cm_events_total", "counter", "RDMA CM events read, by outcome.");
  e.sample("evrdma_cm_events_total", l + "," + label("outcome", "dispatched"), r.cmEvents.dispatched);
  e.sample("evrdma_cm_events_total", l + "," + label("outcome", "without_handler"), r.cmEvents.withoutHandler);
  e.counter("evrdma_cm_budget_yields_total", "Turns that left CM events for a later turn.", l, r.cmEvents.budgetYields);
  e.gauge("evrdma_cm_events_waiting", "RDMA CM events read, waiting for their turn.", l,
          static_cast<double>(r.cmEvents.waiting));
  e.gauge("evrdma_registered_memory_bytes", "Memory evrdma's connections registered.", l,
          static_cast<double>(r.registeredMemory));
  e.gauge("evrdma_memory_budget_bytes", "evrdma's memory budget (0: none).", l, static_cast<double>(r.memoryBudget));
  e.gauge("evrdma_connects_in_flight", "Client connect requests on the wire.", l, r.connectsInFlight);
  e.gauge("evrdma_connects_waiting", "Clients waiting for their turn to connect.", l,
          static_cast<double>(r.connectsWaiting));
  e.gauge("evrdma_shared_receive_buffers", "Receive buffers in the shared receive queues' pools.", l,
          static_cast<double>(r.sharedReceives.buffers));
  e.counter("evrdma_shared_receive_low_watermark_events_total", "The device said a shared receive queue ran low.", l,
            r.sharedReceives.lowWatermarkEvents);
}

void deviceFigures(Exposition& e, const std::vector<evrdma::DeviceStats>& devices) {
  struct Counter {
    const char* name;
    const char* help;
    uint64_t evrdma::CompletionStats::*field;
  };
  static const Counter kCounters[] = {
      {"evrdma_cq_events_total", "Completion events taken from the channel.", &evrdma::CompletionStats::events},
      {"evrdma_cq_polls_total", "ibv_poll_cq calls.", &evrdma::CompletionStats::polls},
      {"evrdma_cq_empty_first_polls_total", "First polls after an event that found nothing (the arm race).",
       &evrdma::CompletionStats::emptyFirstPolls},
      {"evrdma_completions_total", "Work completions.", &evrdma::CompletionStats::completions},
      {"evrdma_stray_completions_total", "Completions for a queue pair no longer attached.",
       &evrdma::CompletionStats::strayCompletions},
      {"evrdma_cq_budget_yields_total", "Turns that left completions for a later turn.",
       &evrdma::CompletionStats::budgetYields},
      {"evrdma_cq_notify_failures_total", "ibv_req_notify_cq failures.", &evrdma::CompletionStats::notifyFailures},
      {"evrdma_cq_poll_failures_total", "ibv_poll_cq failures.", &evrdma::CompletionStats::pollFailures},
      {"evrdma_device_async_events_total", "Device async events.", &evrdma::CompletionStats::asyncEvents},
  };
  for (const Counter& c : kCounters) {
    e.family(c.name, "counter", c.help);
    for (const evrdma::DeviceStats& d : devices) e.sample(c.name, label("device", d.device), d.completions.*(c.field));
  }
  // perPoll[n] counts the polls that returned n completions: a histogram with buckets at powers of two.
  e.family("evrdma_cq_poll_completions", "histogram", "Completions returned per ibv_poll_cq call.");
  for (const evrdma::DeviceStats& d : devices) {
    const std::string l = label("device", d.device);
    uint64_t cumulative = 0;
    size_t n = 0;
    for (size_t bound : {0, 1, 2, 4, 8, 16}) {
      for (; n <= bound && n < d.completions.perPoll.size(); ++n) cumulative += d.completions.perPoll[n];
      e.sample("evrdma_cq_poll_completions_bucket", l + "," + label("le", std::to_string(bound)), cumulative);
    }
    e.sample("evrdma_cq_poll_completions_bucket", l + "," + label("le", "+Inf"), cumulative);
    e.sample("evrdma_cq_poll_completions_sum", l, d.completions.completions);
    e.sample("evrdma_cq_poll_completions_count", l, cumulative);
  }
  e.family("evrdma_rnr_naks_total", "counter", "Receiver-not-ready NAKs of the port (device-wide), by direction.");
  for (const evrdma::DeviceStats& d : devices) {
    if (!d.rnr.available) continue;
    e.sample("evrdma_rnr_naks_total", label("device", d.device) + "," + label("direction", "received"),
             d.rnr.naksReceived);
    e.sample("evrdma_rnr_naks_total", label("device", d.device) + "," + label("direction", "sent"), d.rnr.naksSent);
  }
  e.family("evrdma_rnr_retries_exceeded_total", "counter", "Sends that ran out of RNR retries (device-wide).");
  for (const evrdma::DeviceStats& d : devices)
    if (d.rnr.available) e.sample("evrdma_rnr_retries_exceeded_total", label("device", d.device), d.rnr.retriesExceeded);
}

}  // namespace

std::string prometheusText(const evrdma::Reactor& reactor, const evrdma::Listener& listener,
                           const std::string& listenerLabel, const AppFigures& app, uint64_t sendBacklog) {
  Exposition e;
  listenerFigures(e, listener, listenerLabel, sendBacklog);
  const evrdma::ReactorStats r = reactor.stats();
  reactorFigures(e, r);
  deviceFigures(e, r.devices);
  const std::string program = app.program;
  e.counter((program + "_http_requests_total").c_str(), "HTTP requests the application served.", "", app.httpRequests);
  e.counter((program + "_ticks_total").c_str(), "Ticks of the application's periodic timer.", "", app.ticks);
  e.gauge((program + "_uptime_seconds").c_str(), "Seconds since the server started.", "", app.uptimeSeconds);
  return e.take();
}

namespace {

void appendAgent(std::string& out, evrdma::Agent& agent, bool first, std::chrono::steady_clock::time_point now) {
  const evrdma::ConnectionStats& s = agent.stats();
  char line[512];
  std::snprintf(line, sizeof line,
                "%s\n  {\"peer\": %s, \"state\": \"%s\", \"age_ms\": %lld, \"messages_received\": %" PRIu64
                ", \"messages_sent\": %" PRIu64 ", \"bytes_received\": %" PRIu64 ", \"bytes_sent\": %" PRIu64
                ", \"backlog\": %zu, \"credits\": %u, \"posted_receives\": %u, \"keepalive_probes_sent\": %" PRIu64
                ", \"keepalive_replies_sent\": %" PRIu64 ", \"error\": %s}",
                first ? "" : ",", echo::jsonString(agent.peerAddress()).c_str(), evrdma::toString(agent.state()),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - agent.createdAt()).count()),
                s.messagesReceived, s.messagesSent, s.bytesReceived, s.bytesSent, agent.sendBacklog(),
                agent.sendCredits(), agent.postedRecvs(), s.keepaliveProbesSent, s.keepaliveRepliesSent,
                echo::jsonString(agent.error() != 0 ? std::strerror(-agent.error()) : "").c_str());
  out += line;
}

}  // namespace

std::string agentsJsonSlice(const evrdma::Listener& listener, evrdma::AgentWalk& walk, size_t most) {
  const auto now = std::chrono::steady_clock::now();
  bool first = walk.after == 0;
  std::string out;
  listener.forEachAgentFrom(walk, most, [&](evrdma::Agent& agent) {
    appendAgent(out, agent, first, now);
    first = false;
  });
  return out;
}

std::string agentsJson(const evrdma::Listener& listener) {
  const auto now = std::chrono::steady_clock::now();
  std::string out = "[";
  bool first = true;
  listener.forEachAgent([&](evrdma::Agent& agent) {
    appendAgent(out, agent, first, now);
    first = false;
  });
  return out + (first ? "]\n" : "\n]\n");
}

}  // namespace embedded
