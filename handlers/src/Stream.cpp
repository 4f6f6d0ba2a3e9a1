// Stream: connecting a byte stream (a Client whose handler is the stream's) and the calls on a
// program's end of one.
#include "evrdma/Stream.h"

#include <event2/bufferevent.h>

#include <cerrno>

#include "ByteStream.h"
#include "RegisteredHeap.h"
#include "evrdma/Client.h"

namespace evrdma {

bufferevent* Stream::connect(Reactor& reactor, const std::string& address, uint16_t port,
                             const StreamOptions& options, int* error) noexcept {
  int err = 0;
  detail::ByteStream* stream = detail::ByteStream::create(reactor, options, err);
  if (stream == nullptr) {
    if (error != nullptr) *error = err;
    return nullptr;
  }
  const ClientOptions connection = detail::ByteStream::connectionOptions(options);
  Client::Ptr client = Client::create(reactor, stream->makeHandler(), connection);
  err = client->connect(address, port);
  bufferevent* end = stream->userEnd();
  if (err != 0) {
    client.reset();  // never started: freed at once, with the stream's handler
    bufferevent_free(end);  // the stream ends once libevent has let go of it
    if (error != nullptr) *error = err;
    return nullptr;
  }
  stream->holdClient(std::move(client));
  if (error != nullptr) *error = 0;
  return end;
}

int Stream::shutdownWrite(bufferevent* bev) noexcept {
  detail::ByteStream* stream = detail::ByteStream::of(bev);
  return stream != nullptr ? stream->shutdownWrite() : -EINVAL;
}

bool Stream::isStream(bufferevent* bev) noexcept { return detail::ByteStream::of(bev) != nullptr; }

int Stream::stats(bufferevent* bev, StreamStats& out) noexcept {
  detail::ByteStream* stream = detail::ByteStream::of(bev);
  if (stream == nullptr) return -EINVAL;
  out = stream->stats();
  return 0;
}

int Stream::useRegisteredMemory() noexcept { return detail::RegisteredHeap::install(); }

}  // namespace evrdma
