// RDMA, else TCP, from C: a connect that tries RDMA for a bounded time and then TCP to the same
// address and port, handing over whichever connected (evrdma_connect_rdma_else_tcp); and a
// listener that takes both at one address and port with one callback (EVRDMA_LEV_OPT_ALSO_TCP).
#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "CApiInternal.h"

namespace evrdma::capi {

// One connect under way, on its evrdma_base's list until its callback has been called.
struct ConnectAttempt {
  evrdma_base* rbase = nullptr;
  ConnectAttempt *previous = nullptr, *next = nullptr;
  sockaddr_storage address{};
  int socklen = 0;
  evrdma_connect_cb cb = nullptr;
  void* arg = nullptr;
  bufferevent* bev = nullptr;  // the stream trying, then the socket's
  event* timer = nullptr;  // the RDMA try's bound; then the callback's turn when TCP failed at once
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  unsigned rdmaTriedMs = 0;
  int tcpError = 0;
};

namespace {

constexpr unsigned kDefaultRdmaTryMs = 3000;

void unlink(ConnectAttempt* attempt) {
  if (attempt->previous != nullptr) attempt->previous->next = attempt->next;
  else attempt->rbase->attempts = attempt->next;
  if (attempt->next != nullptr) attempt->next->previous = attempt->previous;
}

void freeAttempt(ConnectAttempt* attempt) {
  unlink(attempt);
  if (attempt->timer != nullptr) event_free(attempt->timer);
  if (attempt->bev != nullptr) bufferevent_free(attempt->bev);
  delete attempt;
}

// The attempt ends: its callback gets the bufferevent (or NULL), and the attempt is freed first,
// so that the callback may free the evrdma_base.
void handOver(ConnectAttempt* attempt, int transport, int error) {
  bufferevent* bev = attempt->bev;
  attempt->bev = nullptr;
  if (bev != nullptr) bufferevent_setcb(bev, nullptr, nullptr, nullptr, nullptr);
  const evrdma_connect_cb cb = attempt->cb;
  void* const arg = attempt->arg;
  const unsigned tried = attempt->rdmaTriedMs;
  freeAttempt(attempt);
  cb(bev, transport, error, tried, arg);
}

void onTcpFailedAtOnce(evutil_socket_t, short, void* self) {
  auto* attempt = static_cast<ConnectAttempt*>(self);
  handOver(attempt, EVRDMA_TRANSPORT_TCP, attempt->tcpError);
}

void onTcpEvent(bufferevent*, short what, void* self) {
  auto* attempt = static_cast<ConnectAttempt*>(self);
  if (what & BEV_EVENT_CONNECTED) {
    handOver(attempt, EVRDMA_TRANSPORT_TCP, 0);
    return;
  }
  const int error = EVUTIL_SOCKET_ERROR();
  bufferevent_free(attempt->bev);
  attempt->bev = nullptr;
  handOver(attempt, EVRDMA_TRANSPORT_TCP, error != 0 ? error : ECONNREFUSED);
}

// The RDMA try is over (it failed, or its time ran out): TCP now.
void tryTcp(ConnectAttempt* attempt) {
  attempt->rdmaTriedMs = static_cast<unsigned>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   std::chrono::steady_clock::now() - attempt->started)
                                                   .count());
  if (attempt->bev != nullptr) bufferevent_free(attempt->bev);  // a stream still connecting is dropped
  event_base* base = attempt->rbase->reactor.base();
  attempt->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
  if (attempt->bev != nullptr) {
    bufferevent_setcb(attempt->bev, nullptr, nullptr, onTcpEvent, attempt);
    if (bufferevent_socket_connect(attempt->bev, reinterpret_cast<sockaddr*>(&attempt->address), attempt->socklen) == 0)
      return;
  }
  // Failed at once: the callback comes on the loop's next turn, as it would have.
  attempt->tcpError = errno != 0 ? errno : ENOMEM;
  if (attempt->bev != nullptr) bufferevent_free(attempt->bev);
  attempt->bev = nullptr;
  event_del(attempt->timer);
  event_assign(attempt->timer, base, -1, 0, onTcpFailedAtOnce, attempt);
  event_active(attempt->timer, EV_TIMEOUT, 0);
}

void onRdmaEvent(bufferevent*, short what, void* self) {
  auto* attempt = static_cast<ConnectAttempt*>(self);
  if (what & BEV_EVENT_CONNECTED) {
    handOver(attempt, EVRDMA_TRANSPORT_RDMA, 0);
    return;
  }
  event_del(attempt->timer);
  tryTcp(attempt);  // refused, unreachable, no device: the peer is tried over TCP
}

void onRdmaTryOver(evutil_socket_t, short, void* self) { tryTcp(static_cast<ConnectAttempt*>(self)); }

struct TcpAcceptor {
  evrdma_listener* listener;
  evrdma_listener_cb cb;
  void* arg;
};

void onTcpAccept(evconnlistener* tcp, evutil_socket_t fd, sockaddr* peer, int socklen, void* self) {
  auto* acceptor = static_cast<TcpAcceptor*>(self);
  bufferevent* bev =
      bufferevent_socket_new(evconnlistener_get_base(tcp), fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
  if (bev == nullptr) {
    close(fd);
    return;
  }
  acceptor->cb(acceptor->listener, bev, peer, socklen, acceptor->arg);
}

}  // namespace

int listenTcpToo(evrdma_listener* made, evrdma_base* rbase, evrdma_listener_cb cb, void* arg, unsigned flags,
                 int backlog, const sockaddr* address, int socklen, uint16_t port) {
  sockaddr_storage at{};
  std::memcpy(&at, address, static_cast<size_t>(socklen));
  if (at.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&at)->sin6_port = htons(port);
  else reinterpret_cast<sockaddr_in*>(&at)->sin_port = htons(port);
  auto* acceptor = new (std::nothrow) TcpAcceptor{made, cb, arg};
  if (acceptor == nullptr) return -ENOMEM;
  const unsigned tcpFlags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                            (flags & (LEV_OPT_REUSEABLE | LEV_OPT_DISABLED | LEV_OPT_BIND_IPV6ONLY));
  made->tcpAcceptor = acceptor;
  made->tcp = evconnlistener_new_bind(rbase->reactor.base(), onTcpAccept, acceptor, tcpFlags, backlog > 0 ? backlog : -1,
                                      reinterpret_cast<sockaddr*>(&at), socklen);
  if (made->tcp == nullptr) {
    const int err = errno != 0 ? errno : EADDRINUSE;
    made->tcpAcceptor = nullptr;
    delete acceptor;
    return -err;
  }
  return 0;
}

}  // namespace evrdma::capi

using namespace evrdma::capi;

evrdma_base::~evrdma_base() {
  while (attempts != nullptr) freeAttempt(attempts);
}

evrdma_listener::~evrdma_listener() {
  if (tcp != nullptr) evconnlistener_free(tcp);  // no callback comes once it is freed
  delete static_cast<TcpAcceptor*>(tcpAcceptor);
}

extern "C" int evrdma_connect_rdma_else_tcp(evrdma_base* rbase, const sockaddr* address, int socklen,
                                            const evrdma_stream_options* options, unsigned rdma_try_ms,
                                            evrdma_connect_cb cb, void* arg) {
  std::string host;
  uint16_t port = 0;
  if (rbase == nullptr || cb == nullptr || !hostAndPort(address, socklen, host, port) ||
      static_cast<size_t>(socklen) > sizeof(sockaddr_storage) || checkBevOptions(options) != 0)
    return -EINVAL;
  auto* attempt = new (std::nothrow) ConnectAttempt;
  if (attempt == nullptr) return -ENOMEM;
  attempt->rbase = rbase;
  std::memcpy(&attempt->address, address, static_cast<size_t>(socklen));
  attempt->socklen = socklen;
  attempt->cb = cb;
  attempt->arg = arg;
  attempt->timer = evtimer_new(rbase->reactor.base(), onRdmaTryOver, attempt);
  if (attempt->timer == nullptr) {
    delete attempt;
    return -ENOMEM;
  }
  attempt->next = rbase->attempts;
  if (attempt->next != nullptr) attempt->next->previous = attempt;
  rbase->attempts = attempt;
  int error = 0;
  attempt->bev = evrdma::Stream::connect(rbase->reactor, host, port, streamOptions(options), &error);
  if (attempt->bev == nullptr) {  // no RDMA CM, or no device for the address: TCP at once
    tryTcp(attempt);
    return 0;
  }
  bufferevent_setcb(attempt->bev, nullptr, nullptr, onRdmaEvent, attempt);
  const timeval bound{static_cast<time_t>((rdma_try_ms != 0 ? rdma_try_ms : kDefaultRdmaTryMs) / 1000),
                      static_cast<suseconds_t>((rdma_try_ms != 0 ? rdma_try_ms : kDefaultRdmaTryMs) % 1000 * 1000)};
  event_base_update_cache_time(rbase->reactor.base());  // the bound counts from now, not from the turn's start
  evtimer_add(attempt->timer, &bound);
  return 0;
}
