// The HTTP side of a demo server's figures (Metrics.h): GET /agents answered a slice of agents at
// a time, and an HTTP server of its own for a program that has none (pingpong-server -H).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "Metrics.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

struct event_base;
struct evhttp;
struct evhttp_request;

namespace embedded {

// Agents per slice of /agents: some 100 KiB of JSON, well under a millisecond of the loop here.
constexpr size_t kAgentsPerSlice = 500;

// Answers GET /agents with agentsJson's array, chunked, a slice of agents at a time: the next
// slice is made once the last one has gone out to the socket, so that a listing of 100 000 agents
// holds the loop for one slice at a time, and the reply's memory to about a slice however slowly
// its client reads (made whole, it was 20 MB and one long turn). An agent there throughout is
// listed once; one that comes or goes meanwhile at most once. A client that goes away ends it.
void replyAgents(evhttp_request* request, const evrdma::Listener& listener, size_t perSlice = kAgentsPerSlice);

// Agents per loop turn that replyMetrics sums the send backlogs of.
constexpr size_t kAgentsPerMetricsStep = 2000;

// Answers GET /metrics (prometheusText): every figure but one is kept by evrdma as it goes and
// read at once; the agents' send backlogs are summed kAgentsPerMetricsStep agents a loop turn, and
// the reply goes when the sum is done, so that a scrape never holds the loop for all the agents.
// A client that goes away ends it.
void replyMetrics(evhttp_request* request, const evrdma::Reactor& reactor, const evrdma::Listener& listener,
                  std::string listenerLabel, const AppFigures& app, size_t perStep = kAgentsPerMetricsStep);

// /metrics and /agents on 127.0.0.1 for a program with no HTTP server of its own.
class FiguresServer {
 public:
  // On `base` (the Reactor's), port 0: any free one. Null with the reason in `error`.
  static std::unique_ptr<FiguresServer> start(event_base* base, uint16_t port, const evrdma::Reactor& reactor,
                                              const evrdma::Listener& listener, std::string listenerLabel,
                                              std::string& error);
  ~FiguresServer();
  FiguresServer(const FiguresServer&) = delete;
  FiguresServer& operator=(const FiguresServer&) = delete;
  uint16_t port() const noexcept { return port_; }

 private:
  FiguresServer(const evrdma::Reactor& reactor, const evrdma::Listener& listener, std::string label)
      : reactor_(reactor), listener_(listener), label_(std::move(label)) {}
  static void onRequest(evhttp_request* request, void* self);

  const evrdma::Reactor& reactor_;
  const evrdma::Listener& listener_;
  std::string label_;
  evhttp* http_ = nullptr;
  uint16_t port_ = 0;
  uint64_t requests_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace embedded
