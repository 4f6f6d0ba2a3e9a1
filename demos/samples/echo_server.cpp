// echo_server: the smallest evrdma server. A Listener on the application's own event_base asks a
// factory about each connect request; the factory accepts it with an Echo handler, which sends
// every message back to its sender. SIGINT drains: the agents finish, then the loop ends.
//   usage: echo_server ADDRESS [PORT]   (PORT 0 or none: any free one; it is printed)
#include <event2/event.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/Watch.h"

namespace {

// One per connection: the factory makes it, the Listener owns it with its Agent.
struct Echo : evrdma::ConnectionHandler {
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    // `data` is valid until this returns: postSend copies it. A server that may send faster than
    // its peer reads waits for onWritable on -ENOBUFS (see demos/pingpong's EchoAgent).
    if (int rc = c.postSend(data, length); rc != 0) {
      std::fprintf(stderr, "%s: echo: %s\n", c.peerAddress().c_str(), std::strerror(-rc));
      c.close();  // fine inside a callback: onClosed follows on a later turn
    }
  }
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override {
    std::fprintf(stderr, "%s: %s: %s\n", c.peerAddress().c_str(), op, std::strerror(-err));
  }
  void onClosed(evrdma::Connection& c) noexcept override {
    std::printf("%s: closed after %llu messages\n", c.peerAddress().c_str(),
                static_cast<unsigned long long>(c.stats().messagesReceived));
  }
};

struct EchoFactory : evrdma::AgentFactory {
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest& request) noexcept override {
    std::printf("%s: connect request\n", request.peerAddress.c_str());
    evrdma::ConnectionOptions options;
    options.maxMessageSize = 4096;  // a longer message fails that connection, saying so
    return evrdma::AcceptDecision::accept(std::make_unique<Echo>(), options);
  }
  void onListenerError(int err, const char* op) noexcept override {
    std::fprintf(stderr, "listener: %s: %s\n", op, std::strerror(-err));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout, "usage: %s ADDRESS [PORT]  (echoes every message; SIGINT drains)\n",
                 argv[0]);
    return argc < 2 ? 2 : 0;
  }
  char* end = nullptr;
  const unsigned long port = argc > 2 ? std::strtoul(argv[2], &end, 10) : 0;  // 0: any free port
  if (argc > 2 && (*end != '\0' || port > 65535)) {
    std::fprintf(stderr, "%s: '%s' is not a port (0 to 65535)\n", argv[0], argv[2]);
    return 2;
  }
  event_base* base = event_base_new();  // the application's own loop
  int status = 0;
  {
    evrdma::Reactor reactor(base);  // borrows the base: evrdma never frees it
    EchoFactory factory;
    evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory);
    if (int rc = listener->listen(argv[1], static_cast<uint16_t>(port)); rc != 0) {
      std::fprintf(stderr, "listen on %s: %s\n", argv[1], std::strerror(-rc));  // e.g. port in use
      status = 1;
    } else {
      std::printf("listening on %s port %u\n", argv[1], listener->port());
      std::fflush(stdout);
      evrdma::SignalWatch interrupt(reactor, SIGINT, [&](int) {
        // New requests are refused from now on; open agents get a second, then are closed.
        listener->drain(std::chrono::seconds(1), [base] { event_base_loopbreak(base); });
      });
      event_base_dispatch(base);
    }
  }
  event_base_free(base);
  return status;
}
