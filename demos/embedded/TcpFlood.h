// TcpFlood: the same flood as evrdma-loop-latency's pingpong clients, carried by TCP bufferevents
// on the application's own event_base: an echo server (evconnlistener) and N clients that each keep
// one message of `size` bytes going back and forth as fast as the loop lets them. The anchor the
// RDMA flood's figures are read against: how fair libevent itself is to the application's events
// under a TCP load.
#pragma once

#include <event2/util.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct bufferevent;
struct event_base;
struct evconnlistener;
struct sockaddr;

namespace hostapp {

class TcpFlood {
 public:
  TcpFlood(event_base* base, size_t size);
  ~TcpFlood();
  TcpFlood(const TcpFlood&) = delete;
  TcpFlood& operator=(const TcpFlood&) = delete;

  // Listens on `address` (numeric IPv4 or IPv6, a free port) and connects `clients` clients to it.
  // Returns 0 or -errno; the round trips begin as each client connects.
  int start(const std::string& address, unsigned clients);
  uint64_t roundTrips() const { return roundTrips_; }
  // The first failure of a client or of the server's side of a connection ("" while none).
  const std::string& error() const { return error_; }

 private:
  static void onAccept(evconnlistener* listener, evutil_socket_t fd, sockaddr* peer, int length, void* self);
  static void onEcho(bufferevent* bev, void* self);      // the server's side: what came goes back
  static void onAnswer(bufferevent* bev, void* self);    // a client's side: one round trip done
  static void onEvent(bufferevent* bev, short what, void* self);
  void send(bufferevent* bev);
  void fail(const char* what, int err);

  event_base* base_;
  std::vector<char> message_;
  evconnlistener* listener_ = nullptr;
  std::vector<bufferevent*> ends_;  // both sides of every connection, freed with the flood
  uint64_t roundTrips_ = 0;
  std::string error_;
};

}  // namespace hostapp
