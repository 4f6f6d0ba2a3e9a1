// Connecting a stream by host name: the program's end at once, as bufferevent_socket_connect_hostname
// gives it; the name looked up with libevent's evdns (the loop never blocks); then the connect to
// the first address found, or BEV_EVENT_ERROR with the lookup's error, as libevent reports it.
#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/util.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "BuffereventView.h"
#include "ByteStream.h"
#include "evrdma/Client.h"
#include "evrdma/Stream.h"

namespace evrdma {
namespace {

// What the lookup's callback needs; freed by the callback, which libevent calls exactly once.
struct Lookup {
  Reactor& reactor;
  detail::ByteStream* stream;
  StreamOptions options;
  uint16_t port;
};

// The numeric text of the first IPv4 or IPv6 address in `found`; false if there is none.
bool firstAddress(const evutil_addrinfo* found, std::string& text) {
  char numeric[INET6_ADDRSTRLEN] = {};
  for (const evutil_addrinfo* at = found; at != nullptr; at = at->ai_next) {
    const void* raw = nullptr;
    if (at->ai_family == AF_INET) raw = &reinterpret_cast<const sockaddr_in*>(at->ai_addr)->sin_addr;
    if (at->ai_family == AF_INET6) raw = &reinterpret_cast<const sockaddr_in6*>(at->ai_addr)->sin6_addr;
    if (raw != nullptr && inet_ntop(at->ai_family, raw, numeric, sizeof numeric) != nullptr) {
      text = numeric;
      return true;
    }
  }
  return false;
}

void onLookedUp(int result, evutil_addrinfo* found, void* arg) {
  std::unique_ptr<Lookup> lookup(static_cast<Lookup*>(arg));
  std::string address;
  const bool any = result == 0 && firstAddress(found, address);
  if (found != nullptr) evutil_freeaddrinfo(found);
  if (result == EVUTIL_EAI_CANCEL) return;  // the stream went first (it cancelled)
  detail::ByteStream* stream = lookup->stream;
  stream->resolved();
  if (!any) {
    stream->failBeforeConnecting(0, result != 0 ? result : EVUTIL_EAI_NONAME);
    return;
  }
  Client::Ptr client = Client::create(lookup->reactor, stream->makeHandler(),
                                      detail::ByteStream::connectionOptions(lookup->options));
  if (int rc = client->connect(address, lookup->port); rc != 0) {
    client.reset();  // never started: its handler goes at once, and the stream knows no connection comes
    stream->failBeforeConnecting(-rc, 0);
    return;
  }
  stream->holdClient(std::move(client));
}

}  // namespace

bufferevent* Stream::connectHostname(Reactor& reactor, evdns_base* dns, int family, const std::string& host,
                                     uint16_t port, const StreamOptions& options, int* error) noexcept {
  auto fail = [error](int err) -> bufferevent* {
    if (error != nullptr) *error = err;
    return nullptr;
  };
  if (dns == nullptr || host.empty() || (family != AF_UNSPEC && family != AF_INET && family != AF_INET6))
    return fail(-EINVAL);
  int err = 0;
  detail::ByteStream* stream = detail::ByteStream::create(reactor, options, err);
  if (stream == nullptr) return fail(err);
  bufferevent* end = stream->userEnd();
  auto* lookup = new (std::nothrow) Lookup{reactor, stream, options, port};
  if (lookup == nullptr) {
    bufferevent_free(end);  // nothing started: the stream ends with it
    return fail(-ENOMEM);
  }
  evutil_addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
  // Answered at once (a numeric address, the hosts file), the callback has run by the return.
  stream->startResolving(evdns_getaddrinfo(dns, host.c_str(), nullptr, &hints, onLookedUp, lookup));
  if (error != nullptr) *error = 0;
  return end;
}

}  // namespace evrdma
