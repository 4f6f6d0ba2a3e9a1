// evrdma-rping: rdma-core's rping on evrdma's reactor, one thread, no blocking calls. It speaks
// rping's protocol (see Rping.h), so either side works with the real rping from rdmacm-utils.
#include <getopt.h>
#include <signal.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "CommandLine.h"
#include "Rping.h"
#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -s [-vVdP] [-S size] [-a addr] [-p port]\n"
               "       %s -c [-vVd] [-S size] [-C count] -a addr [-p port]\n"
               "rping (rdma-core's librdmacm example) on evrdma: the client advertises a buffer, the\n"
               "server RDMA-reads it and RDMA-writes it back into the client's second buffer.\n"
               "Interoperates with the real rping either way.\n"
               "  -s        server side          -c  client side\n"
               "  -a ADDR   address (numeric IPv4/IPv6; server default 0.0.0.0, client default\n"
               "            $EVRDMA_RDMA_IP)\n"
               "  -p PORT   port (default %u)\n"
               "  -S SIZE   ping data size, %zu to %zu (default 64)\n"
               "  -C COUNT  pings, then disconnect (client; default 0: until interrupted)\n"
               "  -v        display ping data         -V  validate ping data (client)\n"
               "  -d        debug output\n"
               "  -P        persistent server: many clients, at once, until SIGINT/SIGTERM (without\n"
               "            it the server serves one client and exits, as rping does)\n"
               "  -h        this help\n"
               "Exit status: 0 on success, 1 on failure, 2 on bad usage.\n",
               prog, prog, rping::kDefaultPort, rping::kMinSize, rping::kMaxSize);
}

// Accepts every connect request (rping sends no private data) with a fresh RpingAgent.
class RpingFactory : public evrdma::AgentFactory {
 public:
  RpingFactory(rping::Settings settings, bool persistent, std::function<void(const rping::Outcome&, const evrdma::Connection&)> done)
      : settings_(settings), persistent_(persistent), done_(std::move(done)) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest& request) noexcept override {
    if (!persistent_ && accepted_ > 0) return evrdma::AcceptDecision::reject("busy: this rping server serves one client (no -P)");
    ++accepted_;
    ++active;
    if (settings_.debug) std::printf("rping server: connect request from %s\n", request.peerAddress.c_str());
    return evrdma::AcceptDecision::accept(std::make_unique<rping::RpingAgent>(settings_, done_), rping::RpingAgent::options());
  }
  size_t active = 0;

 private:
  rping::Settings settings_;
  bool persistent_;
  std::function<void(const rping::Outcome&, const evrdma::Connection&)> done_;
  uint64_t accepted_ = 0;
};

int runServer(evrdma::Reactor& reactor, const std::string& address, uint16_t port, const rping::Settings& settings,
              bool persistent) {
  uint64_t served = 0, failed = 0;
  bool stopping = false;
  evrdma::Listener::Ptr listener;
  auto stop = [&] {
    if (stopping) return;
    stopping = true;
    listener->close();
  };
  RpingFactory factory(settings, persistent, [&](const rping::Outcome& outcome, const evrdma::Connection& c) {
    --factory.active;
    ++served;
    if (!outcome.ok) {
      ++failed;
      std::fprintf(stderr, "rping server: %s: %s\n", c.peerAddress().c_str(), outcome.error.c_str());
    }
    if (!persistent) stop();
    if (stopping && factory.active == 0) reactor.stop();
  });
  listener = evrdma::Listener::create(reactor, factory);
  if (int rc = listener->listen(address, port); rc != 0) {
    std::fprintf(stderr, "rping server: cannot listen on %s port %u: %s%s\n", address.c_str(), port, std::strerror(-rc),
                 pingpong::setupErrorHint(rc));
    return 1;
  }
  auto onSignal = [&](int) {
    stop();
    if (factory.active == 0) reactor.stop();
  };
  evrdma::SignalWatch onInt(reactor, SIGINT, onSignal);
  evrdma::SignalWatch onTerm(reactor, SIGTERM, onSignal);
  if (settings.debug) std::printf("rping server: listening on %s port %u\n", address.c_str(), listener->port());
  std::fflush(stdout);
  reactor.run();
  if (settings.debug) std::printf("rping server: served %" PRIu64 " clients, %" PRIu64 " failed\n", served, failed);
  listener.reset();
  return failed == 0 ? 0 : 1;
}

int runClient(evrdma::Reactor& reactor, const std::string& address, uint16_t port, const rping::Settings& settings) {
  rping::Outcome result;
  auto client = evrdma::Client::create(reactor, std::make_unique<rping::RpingClient>(settings, [&](const rping::Outcome& o) {
                                         result = o;
                                         reactor.stop();
                                       }),
                                       rping::RpingClient::options());
  if (int rc = client->connect(address, port); rc != 0) {
    std::fprintf(stderr, "rping client: cannot connect to %s port %u: %s%s\n", address.c_str(), port, std::strerror(-rc),
                 pingpong::setupErrorHint(rc));
    return 1;
  }
  evrdma::SignalWatch onInt(reactor, SIGINT, [&](int) { client->close(); });
  reactor.run();
  client.reset();
  // Without -C the client pings until interrupted: stopping then is a success.
  if (result.ok || (settings.count == 0 && result.error.empty())) {
    if (settings.debug) std::printf("rping client: %" PRIu64 " pings\n", result.pings);
    return 0;
  }
  std::fprintf(stderr, "rping client: %s (after %" PRIu64 " pings)\n", result.error.empty() ? "stopped" : result.error.c_str(),
               result.pings);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int role = -1;  // 1 server, 0 client
  std::string address;
  unsigned long long port = rping::kDefaultPort, size = 64, count = 0;
  bool persistent = false;
  rping::Settings settings;
  int opt;
  while ((opt = getopt_long(argc, argv, "sca:p:S:C:vVdPh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 's': role = 1; break;
      case 'c': role = 0; break;
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port); break;
      case 'S': ok = pingpong::parseNumber(optarg, rping::kMaxSize, size) && size >= rping::kMinSize; break;
      case 'C': ok = pingpong::parseNumber(optarg, ~0ull, count); break;
      case 'v': settings.verbose = true; break;
      case 'V': settings.validate = true; break;
      case 'd': settings.debug = true; break;
      case 'P': persistent = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("evrdma-rping", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("evrdma-rping", optind, argc, argv)) return 2;
  if (role == -1) {
    std::fprintf(stderr, "evrdma-rping: say -s (server) or -c (client); see -h\n");
    return 2;
  }
  settings.size = size;
  settings.count = count;
  if (address.empty()) {
    const char* env = std::getenv("EVRDMA_RDMA_IP");
    if (role == 1) address = "0.0.0.0";
    else if (env != nullptr) address = env;
    else {
      std::fprintf(stderr, "evrdma-rping: no server address: give -a ADDR\n");
      return 2;
    }
  }
  evrdma::Reactor reactor;
  if (!reactor.valid()) {
    std::fprintf(stderr, "evrdma-rping: cannot create an event loop\n");
    return 1;
  }
  return role == 1 ? runServer(reactor, address, static_cast<uint16_t>(port), settings, persistent)
                   : runClient(reactor, address, static_cast<uint16_t>(port), settings);
}
