// The host application of HostApp.h: its evhttp server and client, its timer and the probes that
// time them.
#include "HostApp.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace hostapp {

Spread spreadOf(std::vector<double> us) {
  Spread s;
  s.count = us.size();
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.median = us[us.size() / 2];
  s.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  s.max = us.back();
  return s;
}

StatsServer::StatsServer(event_base* base, std::function<std::string()> body, int priority)
    : base_(base), priority_(priority), body_(std::move(body)) {}

bufferevent* StatsServer::makeConnection(event_base* base, void* arg) {
  bufferevent* bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (bev != nullptr) (void)bufferevent_priority_set(bev, static_cast<StatsServer*>(arg)->priority_);
  return bev;
}

StatsServer::~StatsServer() {
  if (http_ != nullptr) evhttp_free(http_);
}

int StatsServer::start() {
  http_ = evhttp_new(base_);
  if (http_ == nullptr) return -ENOMEM;
  evhttp_set_gencb(http_, &StatsServer::onRequest, this);
  if (priority_ >= 0) evhttp_set_bevcb(http_, &StatsServer::makeConnection, this);
  evhttp_bound_socket* bound = evhttp_bind_socket_with_handle(http_, "127.0.0.1", 0);
  if (bound == nullptr) return -EADDRNOTAVAIL;
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&address), &length) != 0) return -errno;
  port_ = ntohs(address.sin_port);
  return 0;
}

void StatsServer::onRequest(evhttp_request* request, void* arg) {
  auto* self = static_cast<StatsServer*>(arg);
  if (evhttp_request_get_command(request) != EVHTTP_REQ_GET || std::string(evhttp_request_get_uri(request)) != "/stats") {
    evhttp_send_error(request, 404, "not found");
    return;
  }
  std::string body = self->body_ ? self->body_() : std::string();
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(request, 200, "OK", out);
  evbuffer_free(out);
  ++self->served_;
}

StatsProbe::StatsProbe(evrdma::Reactor& reactor, uint16_t port, std::chrono::milliseconds period, int priority)
    : timer_(reactor, [this] { ask(); }), period_(period) {
  if (priority < 0) {
    connection_ = evhttp_connection_base_new(reactor.base(), nullptr, "127.0.0.1", port);
    return;
  }
  bufferevent* bev = bufferevent_socket_new(reactor.base(), -1, BEV_OPT_CLOSE_ON_FREE);
  if (bev == nullptr) return;
  (void)bufferevent_priority_set(bev, priority);
  connection_ = evhttp_connection_base_bufferevent_new(reactor.base(), nullptr, bev, "127.0.0.1", port);
  if (connection_ == nullptr) bufferevent_free(bev);
}

StatsProbe::~StatsProbe() {
  if (connection_ != nullptr) evhttp_connection_free(connection_);
}

void StatsProbe::start() {
  stopped_ = false;
  timer_.startPeriodic(period_);
}
void StatsProbe::stop() {
  stopped_ = true;
  timer_.cancel();
}

void StatsProbe::ask() {
  if (waiting_ || connection_ == nullptr) return;
  evhttp_request* request = evhttp_request_new(&StatsProbe::onDone, this);
  evhttp_add_header(evhttp_request_get_output_headers(request), "Host", "127.0.0.1");
  sentAt_ = Clock::now();
  if (evhttp_make_request(connection_, request, EVHTTP_REQ_GET, "/stats") != 0) {
    ++failures_;
    return;
  }
  waiting_ = true;
}

void StatsProbe::onDone(evhttp_request* request, void* arg) {
  auto* self = static_cast<StatsProbe*>(arg);
  self->waiting_ = false;
  if (self->stopped_) return;  // asked before stop(): what onResponse would read may be gone
  if (request == nullptr || evhttp_request_get_response_code(request) != 200) {
    ++self->failures_;
    return;
  }
  self->responses_.push_back(std::chrono::duration<double, std::micro>(Clock::now() - self->sentAt_).count());
  evbuffer* in = evhttp_request_get_input_buffer(request);
  std::string body(evbuffer_get_length(in), '\0');
  evbuffer_copyout(in, body.data(), body.size());
  if (self->onResponse) self->onResponse(body);
}

TickProbe::TickProbe(evrdma::Reactor& reactor, std::chrono::milliseconds period, int priority) : period_(period) {
  timer_ = event_new(reactor.base(), -1, EV_PERSIST, &TickProbe::onTimer, this);
  if (timer_ != nullptr && priority >= 0) (void)event_priority_set(timer_, priority);
}

TickProbe::~TickProbe() {
  if (timer_ != nullptr) event_free(timer_);
}

void TickProbe::onTimer(int, short, void* arg) {
  auto* self = static_cast<TickProbe*>(arg);
  auto now = Clock::now();
  self->lateness_.push_back(std::max(0.0, std::chrono::duration<double, std::micro>(now - self->next_).count()));
  self->next_ += self->period_;
  if (self->next_ < now) self->next_ = now + self->period_;  // as libevent reschedules a late periodic timer
  if (self->onTick) self->onTick(self->lateness_.size());
}

void TickProbe::start() {
  if (timer_ == nullptr) return;
  next_ = Clock::now() + period_;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(period_).count();
  const timeval every{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  (void)event_add(timer_, &every);
}

void TickProbe::stop() {
  if (timer_ != nullptr) event_del(timer_);
}

}  // namespace hostapp
