// hello_embedded: the README's example. An application's own event_base drives an evrdma Client
// that sends "hello" to a ping-sr server (pingpong-server), prints the echo and closes.
//   usage: hello_embedded SERVER_ADDRESS [PORT]
#include <event2/event.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "evrdma/Client.h"
#include "evrdma/PrivateData.h"
#include "evrdma/Reactor.h"

struct Hello : evrdma::ConnectionHandler {
  event_base* base;
  int status = 1;
  explicit Hello(event_base* b) : base(b) {}
  void onEstablished(evrdma::Connection& c) noexcept override { c.postSend("hello", 5); }
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    std::printf("echo: %.*s\n", static_cast<int>(length), reinterpret_cast<const char*>(data));
    status = 0;
    c.close();  // fine inside a callback: onClosed follows on a later turn
  }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    std::fprintf(stderr, "%s: %s\n", op, std::strerror(-err));
  }
  void onClosed(evrdma::Connection&) noexcept override { event_base_loopbreak(base); }
};

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout, "usage: %s SERVER_ADDRESS [PORT]  (a pingpong-server)\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  char* end = nullptr;
  const unsigned long port = argc > 2 ? std::strtoul(argv[2], &end, 10) : 12321;  // pingpong-server's default
  if (argc > 2 && (*end != '\0' || port > 65535)) {
    std::fprintf(stderr, "%s: '%s' is not a port (0 to 65535)\n", argv[0], argv[2]);
    return 2;
  }
  event_base* base = event_base_new();  // the application's own loop
  int status = 1;
  {
    evrdma::Reactor reactor(base);  // borrows the base: evrdma never frees it
    evrdma::ClientOptions options;
    options.maxMessageSize = 5;
    auto hello = std::make_unique<Hello>(base);
    Hello* handler = hello.get();
    auto client = evrdma::Client::create(reactor, std::move(hello), options);
    if (int rc = client->connect(argv[1], static_cast<uint16_t>(port), evrdma::pingSrConnectData(1, 5)); rc != 0) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(-rc));  // no callback will fire
    } else {
      event_base_dispatch(base);  // its sockets, timers and signals, and RDMA, on one thread
      status = handler->status;
    }
  }
  event_base_free(base);
  return status;
}
