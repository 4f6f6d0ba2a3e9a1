// What an application that embeds evrdma already has on its event_base, with probes that measure
// how well it is served: an HTTP server (evhttp), an HTTP client that keeps asking it, and a
// periodic timer that records how late each tick fires. Shared by the loop-latency benchmark and
// the tests that prove RDMA traffic never starves the application's own events.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

struct bufferevent;
struct event;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;

namespace hostapp {

using Clock = std::chrono::steady_clock;

// Percentiles of a sample, in microseconds.
struct Spread {
  size_t count = 0;
  double median = 0, p99 = 0, max = 0;
};
Spread spreadOf(std::vector<double> microseconds);

// GET /stats answered with whatever `body()` says; everything else 404.
class StatsServer {
 public:
  // `priority`: the libevent priority of its connections' events (-1: the base's default; the
  // application gave its base priorities with event_base_priority_init).
  StatsServer(event_base* base, std::function<std::string()> body, int priority = -1);
  ~StatsServer();
  // Binds 127.0.0.1 on a free port. Returns 0 or -errno.
  int start();
  uint16_t port() const { return port_; }
  uint64_t served() const { return served_; }

 private:
  static void onRequest(evhttp_request* request, void* self);
  static bufferevent* makeConnection(event_base* base, void* self);
  event_base* base_;
  int priority_;
  evhttp* http_ = nullptr;
  std::function<std::string()> body_;
  uint16_t port_ = 0;
  uint64_t served_ = 0;
};

// Asks GET /stats every `period` (one request at a time) and records each response time.
class StatsProbe {
 public:
  // `priority`: the libevent priority of its connection's events (-1: the base's default).
  StatsProbe(evrdma::Reactor& reactor, uint16_t port, std::chrono::milliseconds period, int priority = -1);
  ~StatsProbe();
  void start();
  // No more requests; the answer to one still on its way is neither recorded nor reported.
  void stop();
  const std::vector<double>& responseMicros() const { return responses_; }
  uint64_t failures() const { return failures_; }
  std::function<void(const std::string& body)> onResponse;  // called with each 200 body

 private:
  static void onDone(evhttp_request* request, void* self);
  void ask();
  evhttp_connection* connection_ = nullptr;
  evrdma::Timer timer_;
  std::chrono::milliseconds period_;
  bool waiting_ = false;
  bool stopped_ = false;
  Clock::time_point sentAt_;
  std::vector<double> responses_;
  uint64_t failures_ = 0;
};

// A periodic timer that records how late each tick fires against its schedule: a plain libevent
// timer, as the application's own would be, at libevent priority `priority` (-1: the default).
class TickProbe {
 public:
  TickProbe(evrdma::Reactor& reactor, std::chrono::milliseconds period, int priority = -1);
  ~TickProbe();
  TickProbe(const TickProbe&) = delete;
  TickProbe& operator=(const TickProbe&) = delete;
  void start();
  void stop();
  const std::vector<double>& latenessMicros() const { return lateness_; }
  size_t ticks() const { return lateness_.size(); }
  std::function<void(size_t tick)> onTick;

 private:
  static void onTimer(int, short, void* self);
  event* timer_ = nullptr;
  std::chrono::milliseconds period_;
  Clock::time_point next_;
  std::vector<double> lateness_;
};

}  // namespace hostapp
