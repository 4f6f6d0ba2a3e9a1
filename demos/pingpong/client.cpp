// pingpong-client: ping-sr client on evrdma. Opens -n connections from one thread; each sends -c
// messages of -s bytes, one at a time, and waits for each echo (verifying it with -v).
#include <getopt.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "CommandLine.h"
#include "Figures.h"
#include "PingPong.h"
#include "evrdma/Client.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDR [options]\n"
               "Ping-pongs with a ping-sr server (OFA ping-sr protocol): sends count messages of\n"
               "data_size bytes, each after the previous one came back.\n"
               "  -a ADDR   server address (numeric IPv4/IPv6; default: $EVRDMA_RDMA_IP)\n"
               "  -p PORT   server port (default %u)\n"
               "  -c N      count: round trips per connection (default 1000)\n"
               "  -s BYTES  data_size: bytes per message (default 64)\n"
               "  -n N      connections at once, all from this one thread (default 1)\n"
               "  -b ADDR[,ADDR...]  connect from these local addresses (numeric, of this host), connection\n"
               "            i from the (i mod k)th: one address's local ports end near 28 000 connections\n"
               "            (default: whichever address the route to the server gives)\n"
               "  -r N      each of them N times in a row: a new connection as soon as the previous\n"
               "            one has closed (connection churn; default 1). A connection that fails after\n"
               "            connecting does not end the series; one that cannot connect does\n"
               "  -v        verify every byte of every echo\n"
               "  -W        once every connection is established (or failed), print a line and wait\n"
               "            for SIGUSR2 before the round trips start (measures setup alone)\n"
               "  -k        keep the connections open after their round trips, until SIGINT (prints a\n"
               "            line once every one has finished them)\n"
               "  -K MS     keepalive: framed connections (the server must say -K too), a server silent\n"
               "            for MS ms is probed, the connection closed after 3 x MS\n"
               "  -F N      at most N connect requests on the wire at once; the others wait their turn\n"
               "            (default: the library's, 64; 0: no limit)\n"
               "  -C MS     connect timeout: no answer from the server within MS milliseconds fails the\n"
               "            connection (default 10000)\n"
               "  -R MS     round-trip timeout: a connection whose echo has not come back within MS\n"
               "            milliseconds fails, saying so (checked every MS/4: it fails within 1.25 x MS;\n"
               "            default 30000; 0: wait for ever)\n"
               "  -P USEC   adaptive polling: after a completion, poll the CQs on every loop turn for USEC\n"
               "            microseconds instead of sleeping until the next event (default 0: never)\n"
               "  -G USEC   stretch the -P window, up to USEC, to cover the gap between completions the\n"
               "            loop last slept through (round trips longer than -P; default 0: never)\n"
               "  -t        trace connections;  -T  trace every message too\n"
               "  -x        print figures: per connection and in all (round trips/s, Mb/s, us per\n"
               "            round trip, longest round trip), the round trip's median, 99%% and\n"
               "            99.9%% percentiles, its average as ib_send_lat takes it (the 2 longest\n"
               "            left out), CPU use, completion-poll histogram\n"
               "  -h        this help\n"
               "SIGINT closes every connection; SIGUSR1 prints where each one stands.\n"
               "Exit status: 0 when every connection made all its round trips, else 1 (2: bad usage).\n",
               prog, pingsr::kDefaultPort);
}

void printFigures(const char* label, uint64_t roundTrips, uint64_t size, double seconds, double longestMs) {
  std::printf("%s: %llu round trips of %llu B in %.3f s: %s, longest round trip %.3f ms\n", label,
              static_cast<unsigned long long>(roundTrips), static_cast<unsigned long long>(size), seconds,
              pingpong::transferFigures(roundTrips, size, seconds).c_str(), longestMs);
}

}  // namespace

int main(int argc, char** argv) {
  const char* envAddress = std::getenv("EVRDMA_RDMA_IP");
  std::string address = envAddress != nullptr ? envAddress : "";
  unsigned long long port = pingsr::kDefaultPort, count = 1000, size = 64, connections = 1, repeats = 1, roundTripTimeout = 30000,
                     connectTimeout = 10000;
  bool verify = false, figures = false, keepOpen = false, inFlightGiven = false, waitForSignal = false;
  unsigned long long inFlight = 0, pollingWindow = 0, pollingStretch = 0, keepaliveMs = 0;
  pingpong::Trace trace = pingpong::Trace::Off;
  std::vector<std::string> sources;  // -b
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:c:s:n:r:R:C:F:P:G:K:b:kWvtTxh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port) && port > 0; break;
      case 'c': ok = pingpong::parseNumber(optarg, ~0ull, count) && count > 0; break;
      case 's': ok = pingpong::parseNumber(optarg, 1ull << 30, size) && size > 0; break;
      case 'n': ok = pingpong::parseNumber(optarg, 100000, connections) && connections > 0; break;
      case 'r': ok = pingpong::parseNumber(optarg, 100000000, repeats) && repeats > 0; break;
      case 'R': ok = pingpong::parseNumber(optarg, 86400000, roundTripTimeout); break;
      case 'b':
        sources.clear();
        for (const char* from = optarg;; ++from) {
          const char* comma = std::strchr(from, ',');
          sources.emplace_back(from, comma != nullptr ? comma : from + std::strlen(from));
          ok = ok && !sources.back().empty();
          if (comma == nullptr) break;
          from = comma;
        }
        break;
      case 'k': keepOpen = true; break;
      case 'K': ok = pingpong::parseNumber(optarg, 86400000, keepaliveMs) && keepaliveMs > 0; break;
      case 'P': ok = pingpong::parseNumber(optarg, 10000000, pollingWindow); break;
      case 'G': ok = pingpong::parseNumber(optarg, 10000000, pollingStretch); break;
      case 'W': waitForSignal = true; break;
      case 'F': ok = pingpong::parseNumber(optarg, 1u << 30, inFlight); inFlightGiven = true; break;
      case 'C': ok = pingpong::parseNumber(optarg, 86400000, connectTimeout) && connectTimeout > 0; break;
      case 'v': verify = true; break;
      case 't': trace = pingpong::Trace::Connections; break;
      case 'T': trace = pingpong::Trace::Messages; break;
      case 'x': figures = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("pingpong-client", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("pingpong-client", optind, argc, argv)) return 2;
  if (address.empty()) {
    std::fprintf(stderr, "pingpong-client: no server address: give -a ADDR\n");
    return 2;
  }

  evrdma::Reactor reactor;
  if (!reactor.valid()) {
    std::fprintf(stderr, "pingpong-client: cannot create an event loop\n");
    return 1;
  }
  if (inFlightGiven) reactor.setMaxConnectsInFlight(static_cast<uint32_t>(inFlight));
  reactor.setPollingWindow(std::chrono::microseconds(pollingWindow));
  reactor.setPollingStretch(std::chrono::microseconds(pollingStretch));
  pingsr::ConnectInfo info{count, size};
  std::vector<pingpong::PingResult> results;
  std::vector<evrdma::Client::Ptr> clients;
  pingpong::DeviceFigures completions;
  size_t open = 0;
  pingpong::CpuMeter cpu;
  pingpong::TransferMeter transfer;  // the round trips alone: first message to last echo, any connection
  pingpong::LatencyHistogram roundTripTimes;  // every round trip of every connection (-x)
  auto started = pingpong::Clock::now();

  evrdma::ClientOptions options;
  options.maxMessageSize = size;
  options.recvDepth = 2;
  options.sendDepth = 2;
  options.connectTimeout = std::chrono::milliseconds(connectTimeout);
  pingpong::useKeepalive(options, std::chrono::milliseconds(keepaliveMs));
  bool interrupted = false;
  size_t holding = 0, endedEarly = 0;  // -k: connections done with their round trips, or closed before
  // -W: established, round trips not started (by index; a connection that closes leaves the list).
  std::vector<std::pair<uint32_t, pingpong::PingClient*>> waitingToStart;
  size_t endedBeforeStart = 0;
  auto reportWaiting = [&] {
    if (waitingToStart.size() + endedBeforeStart != connections) return;
    std::printf("pingpong-client: %zu connections established (%zu failed), waiting for SIGUSR2 to start\n",
                waitingToStart.size(), endedBeforeStart);
    std::fflush(stdout);
  };
  auto reportHolding = [&] {
    if (holding + endedEarly != connections) return;
    std::printf("pingpong-client: %zu connections completed their round trips, holding them open until SIGINT\n",
                holding);
    std::fflush(stdout);
  };
  // Slot `slot` makes its connection number `round` (of `repeats`); the next when it has closed.
  std::function<int(size_t, unsigned long long)> start = [&](size_t slot, unsigned long long round) {
    auto handler = std::make_unique<pingpong::PingClient>(
        static_cast<uint32_t>(round * connections + slot), info, verify, trace, [&, slot, round](const pingpong::PingResult& r) {
          results.push_back(r);
          const size_t waitingBefore = waitingToStart.size();
          waitingToStart.erase(std::remove_if(waitingToStart.begin(), waitingToStart.end(),
                                              [&r](const auto& w) { return w.first == r.index; }),
                               waitingToStart.end());
          if (waitForSignal && round == 0 && (!r.established || waitingToStart.size() < waitingBefore)) {
            ++endedBeforeStart;
            reportWaiting();
          }
          if (keepOpen && !r.succeeded && !interrupted) {
            ++endedEarly;
            reportHolding();
          }
          if (round + 1 < repeats && (r.succeeded || r.established) && !interrupted) {
            // From inside the old connection's last callback: dropping its Ptr there is safe.
            if (start(slot, round + 1) == 0) return;
          }
          if (--open == 0) reactor.stop();
        });
    handler->setRoundTripTimeout(std::chrono::milliseconds(roundTripTimeout));
    handler->setTransferMeter(&transfer);
    if (figures) handler->setLatencyHistogram(&roundTripTimes);
    if (waitForSignal && round == 0) {
      pingpong::PingClient* ping = handler.get();
      const auto index = static_cast<uint32_t>(round * connections + slot);
      handler->waitForStart([&, ping, index] {
        waitingToStart.emplace_back(index, ping);
        reportWaiting();
      });
    }
    if (keepOpen && round + 1 == repeats)
      handler->holdOpen([&](const pingpong::PingResult&) {
        ++holding;
        reportHolding();
      });
    evrdma::ClientOptions own = options;
    if (!sources.empty()) own.sourceAddress = sources[slot % sources.size()];
    if (slot < clients.size()) {
      completions.note(*clients[slot]);
      clients[slot] = evrdma::Client::create(reactor, std::move(handler), own);
    } else {
      clients.push_back(evrdma::Client::create(reactor, std::move(handler), own));
    }
    int rc = clients[slot]->connect(address, static_cast<uint16_t>(port), pingsr::encode(info));
    if (rc != 0)
      std::fprintf(stderr, "pingpong-client: cannot connect to %s port %llu%s%s: %s%s\n", address.c_str(), port,
                   own.sourceAddress.empty() ? "" : " from ", own.sourceAddress.c_str(), std::strerror(-rc),
                   pingpong::setupErrorHint(rc));
    return rc;
  };
  for (unsigned long long i = 0; i < connections; ++i) {
    if (start(i, 0) != 0) return 1;
    ++open;
  }
  evrdma::SignalWatch onInt(reactor, SIGINT, [&](int) {
    interrupted = true;
    for (auto& c : clients) c->close();
  });
  evrdma::SignalWatch onUsr2(reactor, SIGUSR2, [&](int) {
    auto starting = std::move(waitingToStart);
    waitingToStart.clear();
    for (auto& [index, ping] : starting) ping->start();
  });
  // Where every connection stands (for a run that seems stuck).
  evrdma::SignalWatch onUsr1(reactor, SIGUSR1, [&](int) {
    for (size_t i = 0; i < clients.size(); ++i) {
      const evrdma::Connection& c = *clients[i];
      std::fprintf(stderr, "pingpong-client: connection %zu: %s, sent %llu, received %llu, receives posted %u\n", i,
                   evrdma::toString(c.state()), static_cast<unsigned long long>(c.stats().messagesSent),
                   static_cast<unsigned long long>(c.stats().messagesReceived), c.postedRecvs());
    }
  });
  reactor.run();
  double wall = std::chrono::duration<double>(pingpong::Clock::now() - started).count();
  for (auto& c : clients)
    completions.note(*c);

  uint64_t roundTrips = 0, succeeded = 0;
  double longest = 0, longestRoundTripMs = 0;
  std::sort(results.begin(), results.end(), [](auto& a, auto& b) { return a.index < b.index; });
  for (const auto& r : results) {
    roundTrips += r.roundTrips;
    if (r.succeeded) ++succeeded;
    if (r.established && r.seconds() > longest) longest = r.seconds();
    const double roundTripMs = std::chrono::duration<double, std::milli>(r.longestRoundTrip).count();
    longestRoundTripMs = std::max(longestRoundTripMs, roundTripMs);
    if (!r.error.empty()) std::printf("connection %u: %s\n", r.index, r.error.c_str());
    if (figures && r.established)
      printFigures(("connection " + std::to_string(r.index)).c_str(), r.roundTrips, size, r.seconds(), roundTripMs);
  }
  if (figures && connections > 1) printFigures("all connections", roundTrips, size, longest, longestRoundTripMs);
  if (figures && roundTripTimes.count() > 0) {
    // As ib_send_lat prints t_typical and its percentiles (which it gives per half round trip).
    auto us = [](std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e3; };
    std::printf("pingpong-client: round trip: median %.2f us, 99%% %.2f us, 99.9%% %.2f us, min %.2f us, max %.2f us "
                "(%llu round trips)\n",
                us(roundTripTimes.percentile(0.5)), us(roundTripTimes.percentile(0.99)),
                us(roundTripTimes.percentile(0.999)), us(roundTripTimes.min()), us(roundTripTimes.max()),
                static_cast<unsigned long long>(roundTripTimes.count()));
    // ib_send_lat's t_avg leaves its 2 longest round trips out (perftest's print_report_lat sorts
    // them and drops the top LAT_MEASURE_TAIL = 2): the same average, to compare like with like.
    // Here the first round trip is usually one of them: it waits for the server's side of the
    // connection to be established, which perftest's handshake does before it starts timing.
    std::chrono::nanoseconds sum{0};
    std::vector<pingpong::Clock::duration> slowest;
    for (const auto& r : results) {
      sum += r.allRoundTrips;
      slowest.push_back(r.longestRoundTrip);
      slowest.push_back(r.secondLongestRoundTrip);
    }
    std::sort(slowest.rbegin(), slowest.rend());
    const uint64_t timed = roundTripTimes.count();
    if (timed > 2) {
      std::printf("pingpong-client: round trip as ib_send_lat averages it (its 2 longest left out): %.2f us\n",
                  us(sum - slowest[0] - slowest[1]) / static_cast<double>(timed - 2));
    }
  }
  if (figures) {
    // Setup: from the first connect() to the last connection established (of the first round).
    size_t established = 0;
    pingpong::Clock::time_point last = started;
    for (const auto& r : results)
      if (r.established && r.index < connections) {
        ++established;
        last = std::max(last, r.establishedAt);
      }
    const double setup = std::chrono::duration<double>(last - started).count();
    std::printf("pingpong-client: connect: %zu of %llu connections established %.3f s after the first connect() "
                "(%.1f us per connection)\n",
                established, connections, setup, established ? setup * 1e6 / established : 0.0);
  }
  const unsigned long long total = connections * repeats;
  std::printf("pingpong-client: %llu of %llu connections completed %llu round trips of %llu B%s (%.3f s in all)\n",
              static_cast<unsigned long long>(succeeded), total, count, size, verify ? ", every byte verified" : "",
              wall);
  if (figures) pingpong::printProcessFigures("pingpong-client", cpu, completions, &transfer);
  clients.clear();
  return succeeded == total ? 0 : 1;
}
