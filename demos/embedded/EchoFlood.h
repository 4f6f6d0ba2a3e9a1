// EchoFlood: the same flood as evrdma-loop-latency's pingpong clients, carried by bufferevents on
// the application's own event_base: an echo server and N clients that each keep one message of
// `size` bytes going back and forth as fast as the loop lets them, over TCP (an evconnlistener and
// socket bufferevents: the anchor the RDMA floods' figures are read against, how fair libevent
// itself is to the application's events) or over evrdma's streams (a StreamListener and
// Stream::connect: the same program on RDMA bufferevents).
#pragma once

#include <event2/util.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Stream.h"

struct bufferevent;
struct event_base;
struct evconnlistener;
struct sockaddr;

namespace hostapp {

class EchoFlood {
 public:
  EchoFlood(event_base* base, size_t size);
  ~EchoFlood();
  EchoFlood(const EchoFlood&) = delete;
  EchoFlood& operator=(const EchoFlood&) = delete;

  // Listens on `address` (numeric IPv4 or IPv6, a free port) and connects `clients` clients to it,
  // over TCP, or over evrdma's streams on `reactor` (whose base is the flood's). Returns 0 or
  // -errno; the round trips begin as each client connects.
  int startTcp(const std::string& address, unsigned clients);
  int startStreams(evrdma::Reactor& reactor, const std::string& address, unsigned clients);
  uint64_t roundTrips() const { return roundTrips_; }
  // The first failure of a client or of the server's side of a connection ("" while none).
  const std::string& error() const { return error_; }

 private:
  static void onAccept(evconnlistener* listener, evutil_socket_t fd, sockaddr* peer, int length, void* self);
  static void onEcho(bufferevent* bev, void* self);      // the server's side: what came goes back
  static void onAnswer(bufferevent* bev, void* self);    // a client's side: one round trip done
  static void onEvent(bufferevent* bev, short what, void* self);
  void send(bufferevent* bev);
  void serve(bufferevent* server);
  int connectClient(bufferevent* client);
  void fail(const char* what, int err);

  event_base* base_;
  std::vector<char> message_;
  evconnlistener* listener_ = nullptr;
  evrdma::StreamListener::Ptr streamListener_;
  const char* transport_ = "TCP";
  std::vector<bufferevent*> ends_;  // both sides of every connection, freed with the flood
  uint64_t roundTrips_ = 0;
  std::string error_;
};

}  // namespace hostapp
