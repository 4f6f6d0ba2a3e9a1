// evrdma-loop-latency: how well an application's own events are served while evrdma shares its
// loop. One process, one event_base: an evhttp server answering GET /stats, an HTTP client asking
// it every 20 ms, and a 10 ms timer. First with no traffic (quiet), then while N pingpong clients
// and their echo server flood the completion queue on the same base, then while the same flood is
// carried by evrdma's streams (N clients and an echo server on bufferevents over RDMA), then by TCP
// bufferevents (the same program on socket bufferevents, on the same base and address), the
// anchor: how fair libevent itself is under load. Prints the timer's lateness and the HTTP response
// time in each phase, the rates and the CPU, and each flood's ratio to quiet, side by side.
#include <event2/event.h>
#include <getopt.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "CommandLine.h"
#include "HostApp.h"
#include "PingPong.h"
#include "EchoFlood.h"
#include "evrdma/Client.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDR [options]\n"
               "Measures an application's timer and HTTP server on one event_base, first quiet, then while\n"
               "evrdma pingpong clients flood the completion queue on the same base, then while the same\n"
               "flood goes over evrdma's streams (bufferevents), then over TCP bufferevents on that base and\n"
               "address; prints each phase (with its rate and CPU) and each flood's ratio to quiet.\n"
               "  -a ADDR   an address of the RDMA device (numeric; under tools/rdma-run: $EVRDMA_RDMA_IP)\n"
               "  -n N      flooding clients, of each transport (default 4)\n"
               "  -s BYTES  message size (default 64)\n"
               "  -d SECS   seconds per phase (default 3)\n"
               "  -B USEC   the Reactor's turn budget (Reactor::setTurnBudget; default 500, 0: 256 completions)\n"
               "  -A        the application's events first: the base gets two libevent priorities\n"
               "            (event_base_priority_init), the timer and the HTTP connections 0, evrdma's\n"
               "            events and the flood's the default, 1\n"
               "  -h        this help\n",
               prog);
}

struct Phase {
  hostapp::Spread lateness, response;
  size_t ticks = 0;
  uint64_t failures = 0;
  double roundTripsPerSecond = 0;
  double cpuShare = 0;  // the process's CPU time over the phase's wall time (1 = one core)
  uint64_t budgetYields = 0;
};

double cpuSeconds() {
  rusage usage{};
  (void)getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Runs the probes for `seconds` on `reactor` once `ready()` says so.
// `priority`: the libevent priority of the application's events (-1: the default).
Phase measure(evrdma::Reactor& reactor, unsigned long long seconds, const std::function<bool()>& ready,
              const std::function<uint64_t()>& roundTrips, int priority) {
  hostapp::StatsServer http(reactor.base(), [&] { return std::to_string(roundTrips()); }, priority);
  Phase phase;
  if (int rc = http.start(); rc != 0) {
    std::fprintf(stderr, "evrdma-loop-latency: HTTP server: %s\n", std::strerror(-rc));
    return phase;
  }
  hostapp::StatsProbe probe(reactor, http.port(), std::chrono::milliseconds(20), priority);
  hostapp::TickProbe ticks(reactor, std::chrono::milliseconds(10), priority);
  uint64_t startRoundTrips = 0;
  double startCpu = 0;
  hostapp::Clock::time_point started;
  evrdma::Timer end(reactor, [&] { reactor.stop(); });
  evrdma::Timer begin(reactor, [&] {
    if (!ready()) return;
    begin.cancel();
    startRoundTrips = roundTrips();
    startCpu = cpuSeconds();
    started = hostapp::Clock::now();
    ticks.start();
    probe.start();
    end.startOnce(std::chrono::milliseconds(seconds * 1000));
  });
  begin.startPeriodic(std::chrono::milliseconds(5));
  reactor.run();
  double elapsed = std::chrono::duration<double>(hostapp::Clock::now() - started).count();
  phase.cpuShare = elapsed > 0 ? (cpuSeconds() - startCpu) / elapsed : 0;
  phase.lateness = hostapp::spreadOf(ticks.latenessMicros());
  phase.response = hostapp::spreadOf(probe.responseMicros());
  phase.ticks = ticks.ticks();
  phase.failures = probe.failures();
  phase.roundTripsPerSecond = elapsed > 0 ? (roundTrips() - startRoundTrips) / elapsed : 0;
  return phase;
}

void print(const char* name, const Phase& p) {
  std::printf("%-6s timer lateness (us): median %8.0f  p99 %8.0f  max %8.0f   | HTTP response (us): median %8.0f  "
              "p99 %8.0f  max %8.0f   | %zu ticks, %zu responses, %llu failed, %.0f round trips/s, CPU %.0f %%\n",
              name, p.lateness.median, p.lateness.p99, p.lateness.max, p.response.median, p.response.p99, p.response.max,
              p.ticks, p.response.count, static_cast<unsigned long long>(p.failures), p.roundTripsPerSecond,
              100 * p.cpuShare);
}

double ratio(double flood, double quiet) { return flood / (quiet < 1 ? 1 : quiet); }

void printRatios(const char* name, const Phase& flood, const Phase& quiet) {
  std::printf("ratio flood/quiet, %-6s timer lateness p99 %6.1f, max %6.1f; HTTP response median %6.1f, p99 %6.1f\n", name,
              ratio(flood.lateness.p99, quiet.lateness.p99), ratio(flood.lateness.max, quiet.lateness.max),
              ratio(flood.response.median, quiet.response.median), ratio(flood.response.p99, quiet.response.p99));
}

}  // namespace

int main(int argc, char** argv) {
  std::string address;
  unsigned long long clients = 4, size = 64, seconds = 3;
  unsigned long long turnBudget = static_cast<unsigned long long>(evrdma::Reactor::kDefaultTurnBudget.count());
  bool applicationFirst = false;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:n:s:d:B:Ah", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'n': ok = pingpong::parseNumber(optarg, 1000, clients) && clients > 0; break;
      case 's': ok = pingpong::parseNumber(optarg, 1u << 20, size) && size > 0; break;
      case 'd': ok = pingpong::parseNumber(optarg, 3600, seconds) && seconds > 0; break;
      case 'B': ok = pingpong::parseNumber(optarg, 1000000, turnBudget); break;
      case 'A': applicationFirst = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("evrdma-loop-latency", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("evrdma-loop-latency", optind, argc, argv)) return 2;
  if (address.empty()) {
    std::fprintf(stderr, "evrdma-loop-latency: -a ADDR is required (see -h)\n");
    return 2;
  }

  event_base* base = event_base_new();  // the application's own loop
  if (base == nullptr) return 1;
  // Before any event is made: events made afterwards take the middle priority (1 of 0-1).
  if (applicationFirst && event_base_priority_init(base, 2) != 0) {
    std::fprintf(stderr, "evrdma-loop-latency: event_base_priority_init failed\n");
    event_base_free(base);
    return 1;
  }
  const int priority = applicationFirst ? 0 : -1;
  int status = 0;
  {
    evrdma::Reactor reactor(base);
    reactor.setTurnBudget(std::chrono::microseconds(turnBudget));
    Phase quiet = measure(reactor, seconds, [] { return true; }, [] { return uint64_t{0}; }, priority);

    pingpong::EchoFactory factory(pingsr::Limits{}, pingpong::Trace::Off, 0);
    auto listener = evrdma::Listener::create(reactor, factory);
    if (int rc = listener->listen(address, 0); rc != 0) {
      std::fprintf(stderr, "evrdma-loop-latency: cannot listen on %s: %s%s\n", address.c_str(), std::strerror(-rc),
                   pingpong::setupErrorHint(rc));
      event_base_free(base);
      return 1;
    }
    std::vector<evrdma::Client::Ptr> flood;
    std::vector<pingpong::PingClient*> pingers;
    for (unsigned long long i = 0; i < clients; ++i) {
      pingsr::ConnectInfo info{1000000000, size};  // no end of their own
      auto handler = std::make_unique<pingpong::PingClient>(static_cast<uint32_t>(i), info, false, pingpong::Trace::Off, nullptr);
      pingers.push_back(handler.get());
      evrdma::ClientOptions options;
      options.maxMessageSize = size;
      options.recvDepth = options.sendDepth = 2;
      flood.push_back(evrdma::Client::create(reactor, std::move(handler), options));
      if (int rc = flood.back()->connect(address, listener->port(), pingsr::encode(info)); rc != 0) {
        std::fprintf(stderr, "evrdma-loop-latency: connect: %s\n", std::strerror(-rc));
        status = 1;
      }
    }
    auto roundTrips = [&] {
      uint64_t sum = 0;
      for (auto* p : pingers) sum += p->result().roundTrips;
      return sum;
    };
    Phase flooded = status != 0 ? Phase{} : measure(reactor, seconds, [&] { return roundTrips() >= 1000; }, roundTrips, priority);
    if (const evrdma::CompletionStats* cq = flood.empty() ? nullptr : flood.front()->completionStats())
      flooded.budgetYields = cq->budgetYields;
    for (auto* p : pingers)
      if (!p->result().error.empty()) {
        std::fprintf(stderr, "evrdma-loop-latency: a flood client failed: %s\n", p->result().error.c_str());
        status = 1;
      }
    if (flooded.ticks == 0 || flooded.response.count == 0) status = 1;  // starved: that is a failure
    flood.clear();
    listener.reset();

    // The same flood over evrdma's streams, then over TCP, on the same base and address.
    Phase streams;
    {
      hostapp::EchoFlood streamFlood(base, size);
      if (int rc = streamFlood.startStreams(reactor, address, static_cast<unsigned>(clients)); rc != 0) {
        std::fprintf(stderr, "evrdma-loop-latency: stream flood on %s: %s\n", address.c_str(), std::strerror(-rc));
        status = 1;
      } else {
        streams = measure(reactor, seconds,
                          [&] { return streamFlood.roundTrips() >= 1000 || !streamFlood.error().empty(); },
                          [&] { return streamFlood.roundTrips(); }, priority);
      }
      if (!streamFlood.error().empty()) {
        std::fprintf(stderr, "evrdma-loop-latency: %s\n", streamFlood.error().c_str());
        status = 1;
      }
    }
    if (streams.ticks == 0 || streams.response.count == 0) status = 1;
    Phase tcp;
    {
      hostapp::EchoFlood tcpFlood(base, size);
      if (int rc = tcpFlood.startTcp(address, static_cast<unsigned>(clients)); rc != 0) {
        std::fprintf(stderr, "evrdma-loop-latency: TCP flood on %s: %s\n", address.c_str(), std::strerror(-rc));
        status = 1;
      } else {
        tcp = measure(reactor, seconds, [&] { return tcpFlood.roundTrips() >= 1000 || !tcpFlood.error().empty(); },
                      [&] { return tcpFlood.roundTrips(); }, priority);
      }
      if (!tcpFlood.error().empty()) {
        std::fprintf(stderr, "evrdma-loop-latency: %s\n", tcpFlood.error().c_str());
        status = 1;
      }
    }
    if (tcp.ticks == 0 || tcp.response.count == 0) status = 1;

    std::printf("evrdma-loop-latency: one event_base, a 10 ms timer and an HTTP server asked every 20 ms; %llu s quiet, "
                "%llu s while %llu pingpong clients of %llu B flood it over RDMA, %llu s while as many flood it over "
                "evrdma's streams, %llu s over TCP bufferevents (the same program; the same base and address)\n",
                seconds, seconds, clients, size, seconds, seconds);
    print("quiet", quiet);
    print("rdma", flooded);
    print("stream", streams);
    print("tcp", tcp);
    printRatios("rdma", flooded, quiet);
    printRatios("stream", streams, quiet);
    printRatios("tcp", tcp, quiet);
    std::printf("stream flood against the TCP flood: timer lateness p99 %.2f x, HTTP response median %.2f x\n",
                ratio(streams.lateness.p99, tcp.lateness.p99), ratio(streams.response.median, tcp.response.median));
    std::printf("completion budget yields during the RDMA flood: %llu (turn budget %llu us); the application's "
                "events %s\n",
                static_cast<unsigned long long>(flooded.budgetYields), turnBudget,
                applicationFirst ? "first (libevent priority 0 of 0-1)" : "at the same libevent priority as evrdma's");
  }
  event_base_free(base);
  return status;
}
