// blast-client: one-way throughput to a blast-server. Each of -n connections (all from this one
// thread) keeps -b operations of -s bytes in flight until -c of them completed.
#include <getopt.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "Blast.h"
#include "CommandLine.h"
#include "OfaBlast.h"
#include "Figures.h"
#include "evrdma/Client.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDR [options]\n"
               "Blasts data one way at a blast-server, keeping several operations in flight.\n"
               "  -a ADDR   server address (numeric IPv4/IPv6; default: $EVRDMA_RDMA_IP)\n"
               "  -p PORT   server port (default %u)\n"
               "  -m MODE   send       sends into the server's receives (flow-controlled by credits)\n"
               "            write      RDMA writes into a region the server lends\n"
               "            write_imm  RDMA writes with immediate data (not on iWARP)\n"
               "            read       RDMA reads of a region the server sends\n"
               "            (default send)\n"
               "  -b N      buffers: operations in flight per connection (default 8, at most 1024)\n"
               "  -s BYTES  bytes per operation (default 65536)\n"
               "  -c N      operations per connection (default 10000)\n"
               "  -n N      connections at once, all from this one thread (default 1)\n"
               "  -l N      post list: operations go to the device N at a time, as perftest's\n"
               "            --post_list (default 1: each as soon as its buffer is free; at most -b; not\n"
               "            with -o ofa)\n"
               "  -P USEC   adaptive polling: after a completion, poll the CQs on every loop turn for\n"
               "            USEC before sleeping on the completion channel again (default 0: never)\n"
               "  -v        verify: every byte carries a pattern the other side checks\n"
               "  -o ofa    speak the OFA notes' blast-sr-2 instead (port %u): -c is its limit, -s its\n"
               "            data_size, -b its n_data_buffers (the credits); -m does not apply\n"
               "  -t        trace connections\n"
               "  -x        print figures: per connection and in all (MB/s, ops/s), CPU use,\n"
               "            completion-poll histogram, RNR counters\n"
               "  -h        this help\n"
               "Exit status: 0 when every connection completed its count, else 1 (2: bad usage).\n",
               prog, blast::kDefaultPort, blast::ofa::kDefaultPort);
}

// Connects `connections` clients, each with the handler `make(index, done)` returns (it calls
// done(result) from its last callback), and runs the loop until every one has closed; SIGINT closes
// them. The results, in the order they ended; false (said why) if a connect() failed at once.
template <typename Result, typename Make>
bool runClients(evrdma::Reactor& reactor, unsigned long long connections, const std::string& address, uint16_t port,
                const evrdma::ClientOptions& options, const std::vector<uint8_t>& privateData, Make make,
                std::vector<Result>& results, pingpong::DeviceFigures& completions) {
  std::vector<evrdma::Client::Ptr> clients;
  size_t open = 0;
  std::function<void(const Result&)> done = [&](const Result& r) {
    results.push_back(r);
    if (--open == 0) reactor.stop();
  };
  for (unsigned long long i = 0; i < connections; ++i) {
    clients.push_back(evrdma::Client::create(reactor, make(static_cast<uint32_t>(i), done), options));
    if (int rc = clients.back()->connect(address, port, privateData); rc != 0) {
      std::fprintf(stderr, "blast-client: cannot connect to %s port %u: %s%s\n", address.c_str(), port,
                   std::strerror(-rc), pingpong::setupErrorHint(rc));
      return false;
    }
    ++open;
  }
  evrdma::SignalWatch onInt(reactor, SIGINT, [&](int) {
    for (auto& c : clients) c->close();
  });
  reactor.run();
  for (auto& c : clients) completions.note(*c);
  return true;
}

// blast-sr-2 on the wire (-o ofa): `connections` clients, each sends request.limit messages.
int blastOfa(evrdma::Reactor& reactor, const std::string& address, uint16_t port, const blast::ofa::Request& request,
             bool pattern, unsigned long long connections, bool figures) {
  std::vector<blast::ofa::Result> results;
  pingpong::CpuMeter cpu;
  pingpong::DeviceFigures completions;
  auto make = [&](uint32_t index, std::function<void(const blast::ofa::Result&)> done) {
    return std::make_unique<blast::ofa::Client>(index, request, pattern, std::move(done));
  };
  if (!runClients(reactor, connections, address, port, blast::ofa::Client::options(request), blast::ofa::encode(request),
                  make, results, completions))
    return 1;
  uint64_t succeeded = 0;
  for (const auto& r : results) {
    if (r.succeeded) ++succeeded;
    if (!r.error.empty()) std::printf("connection %u: %s\n", r.index, r.error.c_str());
    if (figures || !r.succeeded)
      std::printf("connection %u: blast-sr-2: %s, %llu acks\n", r.index,
                  blast::describe(blast::Mode::Send, r.acked, request.dataSize, r.seconds()).c_str(),
                  static_cast<unsigned long long>(r.acks));
  }
  std::printf("blast-client: %llu of %llu blast-sr-2 connections sent and had acknowledged %llu messages of %llu B\n",
              static_cast<unsigned long long>(succeeded), connections, static_cast<unsigned long long>(request.limit),
              static_cast<unsigned long long>(request.dataSize));
  if (figures) pingpong::printProcessFigures("blast-client", cpu, completions);
  return succeeded == connections ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* envAddress = std::getenv("EVRDMA_RDMA_IP");
  std::string address = envAddress != nullptr ? envAddress : "";
  unsigned long long port = blast::kDefaultPort, buffers = 8, size = 65536, count = 10000, connections = 1;
  unsigned long long postList = 1, pollingWindow = 0;
  blast::Mode mode = blast::Mode::Send;
  bool verify = false, trace = false, figures = false, ofa = false, portGiven = false;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:m:b:s:c:n:o:l:P:vtxh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port) && port > 0; portGiven = true; break;
      case 'o': ok = std::string(optarg) == "ofa"; ofa = true; break;
      case 'm': ok = blast::parseMode(optarg, mode); break;
      case 'b': ok = pingpong::parseNumber(optarg, 1024, buffers) && buffers > 0; break;
      case 's': ok = pingpong::parseNumber(optarg, 1u << 30, size) && size > 0; break;
      case 'c': ok = pingpong::parseNumber(optarg, ~0ull >> 16, count) && count > 0; break;
      case 'n': ok = pingpong::parseNumber(optarg, 100000, connections) && connections > 0; break;
      case 'l': ok = pingpong::parseNumber(optarg, 1024, postList) && postList > 0; break;
      case 'P': ok = pingpong::parseNumber(optarg, 10000000, pollingWindow); break;
      case 'v': verify = true; break;
      case 't': trace = true; break;
      case 'x': figures = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("blast-client", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("blast-client", optind, argc, argv)) return 2;
  if (address.empty()) {
    std::fprintf(stderr, "blast-client: no server address: give -a ADDR\n");
    return 2;
  }

  evrdma::Reactor reactor;
  if (!reactor.valid()) {
    std::fprintf(stderr, "blast-client: cannot create an event loop\n");
    return 1;
  }
  if (postList > buffers) {
    std::fprintf(stderr, "blast-client: -l %llu is more than the %llu buffers (-b) in flight\n", postList, buffers);
    return 2;
  }
  reactor.setPollingWindow(std::chrono::microseconds(pollingWindow));
  if (ofa) {
    if (!portGiven) port = blast::ofa::kDefaultPort;
    return blastOfa(reactor, address, static_cast<uint16_t>(port), blast::ofa::Request{count, size, buffers}, verify,
                    connections, figures);
  }
  blast::Request request;
  request.mode = mode;
  request.buffers = static_cast<uint32_t>(buffers);
  request.size = static_cast<uint32_t>(size);
  request.count = count;
  request.patterned = verify;
  std::vector<blast::Result> results;
  pingpong::CpuMeter cpu;
  pingpong::DeviceFigures completions;
  auto make = [&](uint32_t index, std::function<void(const blast::Result&)> done) {
    return std::make_unique<blast::BlastClient>(index, request, trace, std::move(done), static_cast<uint32_t>(postList));
  };
  if (!runClients(reactor, connections, address, static_cast<uint16_t>(port), blast::BlastClient::options(request),
                  blast::encode(request), make, results, completions))
    return 1;

  std::sort(results.begin(), results.end(), [](auto& a, auto& b) { return a.index < b.index; });
  uint64_t succeeded = 0, operations = 0;
  blast::Clock::time_point first{}, last{};
  for (const auto& r : results) {
    if (r.succeeded) ++succeeded;
    operations += r.operations;
    if (!r.error.empty()) std::printf("connection %u: %s\n", r.index, r.error.c_str());
    if (r.operations > 0) {
      if (first == blast::Clock::time_point{} || r.started < first) first = r.started;
      if (r.finished > last) last = r.finished;
      if (figures)
        std::printf("connection %u: %s, %llu credit waits\n", r.index,
                    blast::describe(mode, r.operations, size, r.seconds()).c_str(),
                    static_cast<unsigned long long>(r.creditWaits));
    }
  }
  const double seconds = std::chrono::duration<double>(last - first).count();
  std::printf("blast-client: %llu of %llu connections completed; all connections: %s%s\n",
              static_cast<unsigned long long>(succeeded), connections,
              blast::describe(mode, operations, size, operations > 0 ? seconds : 0.0).c_str(),
              verify ? ", every byte verified" : "");
  if (figures) pingpong::printProcessFigures("blast-client", cpu, completions);
  return succeeded == connections ? 0 : 1;
}
