// What the C API's files share (CApi.cpp, CApiEitherTransport.cpp): the structs behind its
// opaque handles, and the translation of its arguments.
#pragma once

#include <event2/dns.h>
#include <event2/listener.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "evrdma/Reactor.h"
#include "evrdma/Stream.h"
#include "evrdma/evrdma.h"

namespace evrdma::capi {
struct ConnectAttempt;
// A stream's BEV_OPT_* options: 0, EINVAL (unknown) or EOPNOTSUPP.
int checkBevOptions(const evrdma_stream_options* given);
// The numeric host and the port of an IPv4 or IPv6 address; false for anything else.
bool hostAndPort(const sockaddr* address, int socklen, std::string& host, uint16_t& port);
evrdma::StreamOptions streamOptions(const evrdma_stream_options* given);
// EVRDMA_LEV_OPT_ALSO_TCP: a socket listener beside the stream listener, at its address and port,
// handing its connections to the same callback. 0 or -errno.
int listenTcpToo(evrdma_listener* made, evrdma_base* rbase, evrdma_listener_cb cb, void* arg, unsigned flags,
                 int backlog, const sockaddr* address, int socklen, uint16_t port);
}  // namespace evrdma::capi

struct evrdma_base {
  explicit evrdma_base(event_base* base) : reactor(base) {}
  ~evrdma_base();  // ends the connects still trying (CApiEitherTransport.cpp) before the Reactor goes
  // The lookups of connects by name given no evdns_base: made on first use. Freed after the
  // Reactor (declared before it), which cancels the lookups of streams still looking up.
  struct FreeDns {
    void operator()(evdns_base* dns) const noexcept { evdns_base_free(dns, 0); }
  };
  std::unique_ptr<evdns_base, FreeDns> dns;
  evrdma::Reactor reactor;
  evrdma::capi::ConnectAttempt* attempts = nullptr;  // RDMA-else-TCP connects under way
};

struct evrdma_listener {
  ~evrdma_listener();
  evrdma::StreamListener::Ptr listener;  // null if the address had no RDMA device (EVRDMA_LEV_OPT_ALSO_TCP)
  evconnlistener* tcp = nullptr;          // EVRDMA_LEV_OPT_ALSO_TCP
  void* tcpAcceptor = nullptr;            // its callback's argument (CApiEitherTransport.cpp)
};

