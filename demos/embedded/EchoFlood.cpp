// EchoFlood: an echo server and ping-pong clients on bufferevents, over TCP (the anchor of the
// loop-latency benchmark) or evrdma's streams.
#include "EchoFlood.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace hostapp {
namespace {

void noDelay(evutil_socket_t fd) {
  // Each message is a whole request: Nagle would hold it for the previous one's ACK.
  const int on = 1;
  if (fd >= 0) (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // (a stream has none)
}

}  // namespace

EchoFlood::EchoFlood(event_base* base, size_t size) : base_(base), message_(size, 'x') {}

EchoFlood::~EchoFlood() {
  for (bufferevent* end : ends_) bufferevent_free(end);
  if (listener_ != nullptr) evconnlistener_free(listener_);
  streamListener_.reset();
}

int EchoFlood::startTcp(const std::string& address, unsigned clients) {
  sockaddr_storage where{};
  int length = sizeof where;
  if (evutil_parse_sockaddr_port(address.c_str(), reinterpret_cast<sockaddr*>(&where), &length) != 0)
    return -EINVAL;
  listener_ = evconnlistener_new_bind(base_, onAccept, this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                      reinterpret_cast<sockaddr*>(&where), length);
  if (listener_ == nullptr) return -errno;
  socklen_t bound = sizeof where;
  if (getsockname(evconnlistener_get_fd(listener_), reinterpret_cast<sockaddr*>(&where), &bound) != 0) return -errno;
  for (unsigned i = 0; i < clients; ++i) {
    bufferevent* client = bufferevent_socket_new(base_, -1, BEV_OPT_CLOSE_ON_FREE);
    if (client == nullptr) return -ENOMEM;
    if (int rc = connectClient(client); rc != 0) return rc;
    if (bufferevent_socket_connect(client, reinterpret_cast<sockaddr*>(&where), static_cast<int>(bound)) != 0)
      return -ECONNREFUSED;
  }
  return 0;
}

int EchoFlood::startStreams(evrdma::Reactor& reactor, const std::string& address, unsigned clients) {
  transport_ = "stream";
  streamListener_ = evrdma::StreamListener::create(reactor, [this](bufferevent* server, const sockaddr*, int) {
    serve(server);
  });
  if (int rc = streamListener_->listen(address, 0); rc != 0) return rc;
  for (unsigned i = 0; i < clients; ++i) {
    int error = 0;
    bufferevent* client = evrdma::Stream::connect(reactor, address, streamListener_->port(), {}, &error);
    if (client == nullptr) return error;
    if (int rc = connectClient(client); rc != 0) return rc;
  }
  return 0;
}

int EchoFlood::connectClient(bufferevent* client) {
  ends_.push_back(client);
  bufferevent_setcb(client, onAnswer, nullptr, onEvent, this);
  bufferevent_setwatermark(client, EV_READ, message_.size(), 0);
  return bufferevent_enable(client, EV_READ) == 0 ? 0 : -EINVAL;
}

void EchoFlood::serve(bufferevent* server) {
  ends_.push_back(server);
  bufferevent_setcb(server, onEcho, nullptr, onEvent, this);
  bufferevent_enable(server, EV_READ);
}

void EchoFlood::onAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* self) {
  auto* flood = static_cast<EchoFlood*>(self);
  bufferevent* server = bufferevent_socket_new(flood->base_, fd, BEV_OPT_CLOSE_ON_FREE);
  if (server == nullptr) {
    evutil_closesocket(fd);
    flood->fail("accept", ENOMEM);
    return;
  }
  noDelay(fd);
  flood->serve(server);
}

void EchoFlood::onEcho(bufferevent* bev, void*) {
  evbuffer_add_buffer(bufferevent_get_output(bev), bufferevent_get_input(bev));
}

void EchoFlood::onAnswer(bufferevent* bev, void* self) {
  auto* flood = static_cast<EchoFlood*>(self);
  evbuffer* input = bufferevent_get_input(bev);
  while (evbuffer_get_length(input) >= flood->message_.size()) {
    evbuffer_drain(input, flood->message_.size());
    ++flood->roundTrips_;
    flood->send(bev);
  }
}

void EchoFlood::onEvent(bufferevent* bev, short what, void* self) {
  auto* flood = static_cast<EchoFlood*>(self);
  if ((what & BEV_EVENT_CONNECTED) != 0) {
    noDelay(bufferevent_getfd(bev));
    flood->send(bev);
    return;
  }
  // Nobody closes before the flood is freed: an end or an error here is a failure.
  flood->fail((what & BEV_EVENT_EOF) != 0 ? "closed by the peer" : "error", EVUTIL_SOCKET_ERROR());
  bufferevent_disable(bev, EV_READ | EV_WRITE);
}

void EchoFlood::send(bufferevent* bev) { bufferevent_write(bev, message_.data(), message_.size()); }

void EchoFlood::fail(const char* what, int err) {
  if (!error_.empty()) return;
  error_ = std::string(transport_) + " flood: " + what + (err != 0 ? std::string(": ") + std::strerror(err) : "");
}

}  // namespace hostapp
