// The C API (evrdma/evrdma.h): evrdma_base over a Reactor, streams and stream listeners, each
// call a thin layer over the C++ one, errors as errno (for what makes something) or -errno.
#include "evrdma/evrdma.h"

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/listener.h>
#include <netinet/in.h>

#include <cerrno>
#include <memory>
#include <new>
#include <string>

#include "CApiInternal.h"
#include "evrdma/Reactor.h"
#include "evrdma/Stream.h"

namespace evrdma::capi {

// The listener's LEV_OPT_* flags (docs/streams.md has each one's meaning on a stream).
constexpr unsigned kListenerFlagsKnown = LEV_OPT_LEAVE_SOCKETS_BLOCKING | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                                         LEV_OPT_REUSEABLE | LEV_OPT_THREADSAFE | LEV_OPT_DISABLED |
                                         LEV_OPT_DEFERRED_ACCEPT | LEV_OPT_REUSEABLE_PORT | LEV_OPT_BIND_IPV6ONLY;
// A listener is served on its base's thread only; the RDMA CM spreads no port's requests over
// listeners of several processes.
constexpr unsigned kListenerFlagsRefused = LEV_OPT_THREADSAFE | LEV_OPT_REUSEABLE_PORT;

// A stream's BEV_OPT_* options: 0, or EINVAL (unknown), or EOPNOTSUPP (THREADSAFE: a stream is
// served on its base's thread only). CLOSE_ON_FREE and DEFER_CALLBACKS are what a stream always
// does; UNLOCK_CALLBACKS has no lock to release.
int checkBevOptions(const evrdma_stream_options* given) {
  if (given == nullptr) return 0;
  constexpr int kKnown = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_THREADSAFE | BEV_OPT_DEFER_CALLBACKS | BEV_OPT_UNLOCK_CALLBACKS;
  if ((given->bev_options & ~kKnown) != 0) return EINVAL;
  if ((given->bev_options & BEV_OPT_THREADSAFE) != 0) return EOPNOTSUPP;
  return 0;
}

// The numeric host and the port of an IPv4 or IPv6 address; false for anything else.
bool hostAndPort(const sockaddr* address, int socklen, std::string& host, uint16_t& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET && socklen >= static_cast<int>(sizeof(sockaddr_in))) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) == nullptr) return false;
    port = ntohs(in->sin_port);
  } else if (address->sa_family == AF_INET6 && socklen >= static_cast<int>(sizeof(sockaddr_in6))) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text) == nullptr) return false;
    port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  host = text;
  return true;
}

evrdma::StreamOptions streamOptions(const evrdma_stream_options* given) {
  evrdma::StreamOptions options;
  if (given == nullptr) return options;
  if (given->max_message_size != 0) options.connection.maxMessageSize = given->max_message_size;
  if (given->recv_depth != 0) options.connection.recvDepth = given->recv_depth;
  if (given->send_depth != 0) options.connection.sendDepth = given->send_depth;
  if (given->receive_window != 0) options.receiveWindow = given->receive_window;
  if (given->send_window != 0) options.sendWindow = given->send_window;
  if (given->connect_timeout_ms != 0) options.connection.connectTimeout = std::chrono::milliseconds(given->connect_timeout_ms);
  options.connection.keepaliveInterval = std::chrono::milliseconds(given->keepalive_interval_ms);
  if (given->lend_from != 0) options.lendFrom = given->lend_from;
  if (given->lending_buffers != 0) options.lendingBuffers = given->lending_buffers;
  options.connection.creditTimeout = std::chrono::milliseconds(given->send_timeout_ms);
  return options;
}

}  // namespace evrdma::capi

using namespace evrdma::capi;

extern "C" {

evrdma_base* evrdma_base_new(event_base* base) {
  if (base == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* made = new (std::nothrow) evrdma_base(base);
  if (made == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (!made->reactor.valid()) {
    delete made;
    errno = ENOMEM;
    return nullptr;
  }
  return made;
}

int evrdma_use_registered_memory(void) { return evrdma::Stream::useRegisteredMemory(); }

void evrdma_base_free(evrdma_base* rbase) { delete rbase; }

void evrdma_base_set_linger(evrdma_base* rbase, unsigned msec) {
  if (rbase != nullptr) rbase->reactor.setLinger(std::chrono::milliseconds(msec));
}

void evrdma_base_set_polling_window(evrdma_base* rbase, unsigned usec) {
  if (rbase != nullptr) rbase->reactor.setPollingWindow(std::chrono::microseconds(usec));
}

void evrdma_base_set_polling_stretch(evrdma_base* rbase, unsigned usec) {
  if (rbase != nullptr) rbase->reactor.setPollingStretch(std::chrono::microseconds(usec));
}

void evrdma_base_set_turn_budget(evrdma_base* rbase, unsigned usec) {
  if (rbase != nullptr) rbase->reactor.setTurnBudget(std::chrono::microseconds(usec));
}

void evrdma_stream_options_init(evrdma_stream_options* options) {
  if (options == nullptr) return;
  const evrdma::StreamOptions defaults;
  options->max_message_size = defaults.connection.maxMessageSize;
  options->recv_depth = defaults.connection.recvDepth;
  options->send_depth = defaults.connection.sendDepth;
  options->receive_window = defaults.receiveWindow;
  options->send_window = defaults.sendWindow;
  options->connect_timeout_ms = static_cast<unsigned>(defaults.connection.connectTimeout.count());
  options->keepalive_interval_ms = static_cast<unsigned>(defaults.connection.keepaliveInterval.count());
  options->lend_from = defaults.lendFrom;
  options->lending_buffers = defaults.lendingBuffers;
  options->send_timeout_ms = static_cast<unsigned>(defaults.connection.creditTimeout.count());
  options->bev_options = 0;
}

bufferevent* evrdma_bufferevent_connect(evrdma_base* rbase, const sockaddr* address, int socklen,
                                        const evrdma_stream_options* options) {
  std::string host;
  uint16_t port = 0;
  if (rbase == nullptr || !hostAndPort(address, socklen, host, port)) {
    errno = EINVAL;
    return nullptr;
  }
  if (int refused = checkBevOptions(options); refused != 0) {
    errno = refused;
    return nullptr;
  }
  int error = 0;
  bufferevent* bev = evrdma::Stream::connect(rbase->reactor, host, port, streamOptions(options), &error);
  if (bev == nullptr) errno = -error;
  return bev;
}

bufferevent* evrdma_bufferevent_connect_hostname(evrdma_base* rbase, evdns_base* dns_base, int family,
                                                 const char* hostname, int port, const evrdma_stream_options* options) {
  if (rbase == nullptr || hostname == nullptr || port < 0 || port > 65535) {
    errno = EINVAL;
    return nullptr;
  }
  if (int refused = checkBevOptions(options); refused != 0) {
    errno = refused;
    return nullptr;
  }
  if (dns_base == nullptr) {
    if (!rbase->dns)
      rbase->dns.reset(evdns_base_new(rbase->reactor.base(),
                                      EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE));
    if (!rbase->dns) {
      errno = ENOMEM;
      return nullptr;
    }
    dns_base = rbase->dns.get();
  }
  int error = 0;
  bufferevent* bev = evrdma::Stream::connectHostname(rbase->reactor, dns_base, family, hostname,
                                                     static_cast<uint16_t>(port), streamOptions(options), &error);
  if (bev == nullptr) errno = -error;
  return bev;
}

int evrdma_bufferevent_shutdown_write(bufferevent* bev) { return evrdma::Stream::shutdownWrite(bev); }

int evrdma_bufferevent_is_stream(bufferevent* bev) { return evrdma::Stream::isStream(bev) ? 1 : 0; }

evrdma_listener* evrdma_listener_new_bind(evrdma_base* rbase, evrdma_listener_cb cb, void* arg, unsigned flags,
                                          int backlog, const sockaddr* address, int socklen,
                                          const evrdma_stream_options* options) {
  return evrdma_listener_new_bind_workers(rbase, cb, arg, flags, backlog, address, socklen, options, nullptr, 0);
}

int evrdma_base_accept_posts(evrdma_base* rbase) {
  if (rbase == nullptr) return -EINVAL;
  return rbase->reactor.acceptPosts();
}

evrdma_listener* evrdma_listener_new_bind_workers(evrdma_base* rbase, evrdma_listener_cb cb, void* arg, unsigned flags,
                                                  int backlog, const sockaddr* address, int socklen,
                                                  const evrdma_stream_options* options, evrdma_base* const* workers,
                                                  unsigned count) {
  std::string host;
  uint16_t port = 0;
  const bool tcpToo = (flags & EVRDMA_LEV_OPT_ALSO_TCP) != 0;
  if (rbase == nullptr || cb == nullptr || (flags & ~(kListenerFlagsKnown | EVRDMA_LEV_OPT_ALSO_TCP)) != 0 ||
      !hostAndPort(address, socklen, host, port) || (count > 0 && workers == nullptr) || (tcpToo && count > 0)) {
    errno = EINVAL;
    return nullptr;
  }
  if (int refused = (flags & kListenerFlagsRefused) != 0 ? EOPNOTSUPP : checkBevOptions(options); refused != 0) {
    errno = refused;
    return nullptr;
  }
  for (unsigned i = 0; i < count; ++i) {
    if (workers[i] == nullptr || workers[i] == rbase) {
      errno = EINVAL;
      return nullptr;
    }
  }
  auto* made = new (std::nothrow) evrdma_listener;
  if (made == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  evrdma::StreamListenerOptions listenerOptions;
  listenerOptions.stream = streamOptions(options);
  listenerOptions.listener.reuseAddress = (flags & LEV_OPT_REUSEABLE) != 0;
  listenerOptions.listener.ipv6Only = (flags & LEV_OPT_BIND_IPV6ONLY) != 0;
  for (unsigned i = 0; i < count; ++i) listenerOptions.listener.workers.push_back(&workers[i]->reactor);
  // Port 0 taking TCP too: the RDMA CM picks the port in its own port space (on RoCE apart from
  // TCP's), and a TCP socket may hold that number: the RDMA listener is let go and another port
  // picked, up to kPortPicks times (each pick random: with half the ports held, 16 all fail once
  // in 65 536).
  constexpr int kPortPicks = 16;
  for (int pick = 1;; ++pick) {
    made->listener = evrdma::StreamListener::create(
        rbase->reactor,
        // By value: with workers it runs on their threads, and evrdma_listener_free may free `made`
        // meanwhile (the listener's own state lives on until its streams are handed out or closed).
        [made, cb, arg](bufferevent* bev, const sockaddr* peer, int length) { cb(made, bev, peer, length, arg); },
        listenerOptions);
    if (int rc = made->listener->listen(host, port, backlog > 0 ? backlog : 0); rc != 0) {
      // Taking TCP too, an address no RDMA device serves is served over TCP alone (as on a machine
      // without RDMA): evrdma_listener_takes_rdma says so.
      if (!tcpToo || (rc != -ENODEV && rc != -EADDRNOTAVAIL)) {
        delete made;
        errno = -rc;
        return nullptr;
      }
      made->listener.reset();
    }
    if (made->listener && (flags & LEV_OPT_DISABLED) != 0) made->listener->disable();
    if (!tcpToo) break;
    const uint16_t bound = made->listener ? made->listener->port() : port;
    const int rc = listenTcpToo(made, rbase, cb, arg, flags, backlog, address, socklen, bound);
    if (rc == 0) break;
    if (rc == -EADDRINUSE && port == 0 && made->listener && pick < kPortPicks) {
      made->listener.reset();  // its port is TCP's: pick again
      continue;
    }
    delete made;
    errno = -rc;
    return nullptr;
  }
  return made;
}

int evrdma_listener_enable(evrdma_listener* listener) {
  if (listener == nullptr) return -EINVAL;
  if (listener->listener) listener->listener->enable();
  if (listener->tcp != nullptr) evconnlistener_enable(listener->tcp);
  return 0;
}

int evrdma_listener_disable(evrdma_listener* listener) {
  if (listener == nullptr) return -EINVAL;
  if (listener->listener) listener->listener->disable();
  if (listener->tcp != nullptr) evconnlistener_disable(listener->tcp);
  return 0;
}

uint16_t evrdma_listener_get_port(const evrdma_listener* listener) {
  if (listener == nullptr) return 0;
  if (listener->listener) return listener->listener->port();
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (listener->tcp == nullptr ||
      getsockname(evconnlistener_get_fd(listener->tcp), reinterpret_cast<sockaddr*>(&bound), &length) != 0)
    return 0;
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

int evrdma_listener_takes_rdma(const evrdma_listener* listener) { return listener != nullptr && listener->listener ? 1 : 0; }

void evrdma_listener_free(evrdma_listener* listener) { delete listener; }

}  // extern "C"
