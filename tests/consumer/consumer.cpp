// A tiny program of somebody else's, built against an installed evrdma (find_package, pkg-config)
// or with evrdma as a subproject (add_subdirectory): only the public headers, evrdma::evrdma.
// Over real RDMA it listens, connects to itself, and checks `count` echoes.
//   usage: evrdma-consumer ADDRESS [COUNT]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

namespace {

struct Echo : evrdma::ConnectionHandler {
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override { c.postSend(data, length); }
};

struct EchoFactory : evrdma::AgentFactory {
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::accept(std::make_unique<Echo>());
  }
};

struct Pinger : evrdma::ConnectionHandler {
  evrdma::Reactor& reactor;
  int left;
  int echoes = 0;
  std::string error;
  Pinger(evrdma::Reactor& r, int count) : reactor(r), left(count) {}
  void next(evrdma::Connection& c) {
    const std::string message = "ping " + std::to_string(left);
    if (int rc = c.postSend(message.data(), message.size()); rc != 0) error = std::strerror(-rc);
  }
  void onEstablished(evrdma::Connection& c) noexcept override { next(c); }
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    const std::string expected = "ping " + std::to_string(left);
    if (std::string(reinterpret_cast<const char*>(data), length) != expected) error = "wrong echo";
    ++echoes;
    if (--left > 0 && error.empty())
      next(c);
    else
      c.close();
  }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    error = std::string(op) + ": " + std::strerror(-err);
  }
  void onClosed(evrdma::Connection&) noexcept override { reactor.stop(); }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::printf("usage: %s ADDRESS [COUNT]\n  listens on ADDRESS (an RDMA device's IPv4 address), connects to itself and\n"
                "  checks COUNT echoes (default 100)\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  const int count = argc > 2 ? std::atoi(argv[2]) : 100;
  evrdma::Reactor reactor;
  EchoFactory factory;
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
  if (int rc = listener->listen(argv[1], 0); rc != 0) {
    std::fprintf(stderr, "evrdma-consumer: listen: %s\n", std::strerror(-rc));
    return 1;
  }
  auto pinger = std::make_unique<Pinger>(reactor, count);
  Pinger* results = pinger.get();
  evrdma::Client::Ptr client = evrdma::Client::create(reactor, std::move(pinger));
  if (int rc = client->connect(argv[1], listener->port()); rc != 0) {
    std::fprintf(stderr, "evrdma-consumer: connect: %s\n", std::strerror(-rc));
    return 1;
  }
  reactor.run();
  if (!results->error.empty() || results->echoes != count) {
    std::fprintf(stderr, "evrdma-consumer: %d of %d echoes: %s\n", results->echoes, count, results->error.c_str());
    return 1;
  }
  std::printf("evrdma-consumer: %d echoes checked\n", results->echoes);
  return 0;
}
