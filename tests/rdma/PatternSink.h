// PatternSink: the peer's end of the stream tests that check every byte: a pattern of bytes by
// offset, a Sink (a StreamListener on a ReactorThread) that reads each stream it accepts to its
// end against it, and waitOnPeer (a condition on the peer's thread, waited for from the test's).
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "RunUntil.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Stream.h"

namespace evrdma::test {

inline uint8_t patternByte(uint64_t index) { return static_cast<uint8_t>((index * 2654435761u) >> 13 ^ index >> 20); }

// Reads every stream it accepts to its end, checking each byte (the peer's end, on its own thread;
// read it there, with runAndWait).
struct Sink {
  struct Stream {
    uint64_t bytes = 0, firstBad = UINT64_MAX;
    bool eof = false;
    int error = 0;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  evrdma::StreamListener::Ptr listener;

  static void onRead(bufferevent* bev, void* arg) {
    auto* stream = static_cast<Stream*>(arg);
    evbuffer* input = bufferevent_get_input(bev);
    evbuffer_iovec pieces[16];
    int n = 0;
    while ((n = evbuffer_peek(input, -1, nullptr, pieces, 16)) > 0) {
      size_t taken = 0;
      for (int i = 0; i < n && i < 16; ++i) {
        const auto* bytes = static_cast<const uint8_t*>(pieces[i].iov_base);
        for (size_t k = 0; k < pieces[i].iov_len; ++k)
          if (bytes[k] != patternByte(stream->bytes + k) && stream->firstBad == UINT64_MAX) stream->firstBad = stream->bytes + k;
        stream->bytes += pieces[i].iov_len;
        taken += pieces[i].iov_len;
      }
      evbuffer_drain(input, taken);
    }
  }
  static void onEvent(bufferevent* bev, short what, void* arg) {
    auto* stream = static_cast<Stream*>(arg);
    if (what & BEV_EVENT_EOF) stream->eof = true;
    if (what & BEV_EVENT_ERROR) stream->error = EVUTIL_SOCKET_ERROR();
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) bufferevent_free(bev);
  }
  int listen(evrdma::Reactor& reactor, const std::string& ip) {
    listener = evrdma::StreamListener::create(reactor, [this](bufferevent* bev, const sockaddr*, int) {
      streams.push_back(std::make_unique<Stream>());
      bufferevent_setcb(bev, onRead, nullptr, onEvent, streams.back().get());
      bufferevent_enable(bev, EV_READ);
    });
    return listener->listen(ip, 0);
  }
  // Every stream ended (EOF or an error), `count` of them.
  bool allEnded(size_t count) const {
    if (streams.size() != count) return false;
    for (const auto& stream : streams)
      if (!stream->eof && stream->error == 0) return false;
    return true;
  }
  // Stream `n` (from 1) ended.
  bool ended(size_t n) const { return streams.size() >= n && (streams[n - 1]->eof || streams[n - 1]->error != 0); }
};

// Waits (on the test's thread) until `done` holds on the peer's thread; false after a minute.
inline bool waitOnPeer(evrdma::ReactorThread& peer, const std::function<bool()>& done) {
  for (int i = 0; i < 600; ++i) {
    bool reached = false;
    peer.runAndWait([&] { reached = done(); });
    if (reached) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// A new stream on `reactor` to `ip` and `port`, once connected (null if it did not), its callbacks
// cleared; `whileConnecting` runs on it first (what a program writes before it is up).
inline bufferevent* connectedStream(evrdma::Reactor& reactor, const std::string& ip, uint16_t port,
                                    const evrdma::StreamOptions& options = {},
                                    const std::function<void(bufferevent*)>& whileConnecting = nullptr) {
  bufferevent* bev = evrdma::Stream::connect(reactor, ip, port, options);
  if (bev == nullptr) return nullptr;
  bool connected = false;
  bufferevent_setcb(bev, nullptr, nullptr, [](bufferevent*, short what, void* up) {
    if (what & BEV_EVENT_CONNECTED) *static_cast<bool*>(up) = true;
  }, &connected);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  if (whileConnecting) whileConnecting(bev);
  if (!runUntil(reactor, [&] { return connected; }, std::chrono::seconds(60))) return nullptr;
  bufferevent_setcb(bev, nullptr, nullptr, nullptr, nullptr);
  return bev;
}

}  // namespace evrdma::test
