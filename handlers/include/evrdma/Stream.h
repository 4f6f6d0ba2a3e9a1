/// \file
/// Byte streams over RDMA as libevent's own `struct bufferevent`: Stream::connect hands the program
/// a bufferevent at once, as bufferevent_socket_connect does, and a StreamListener hands it one
/// per accepted peer, as an evconnlistener does. On it the program's code stays what it is over
/// TCP: bufferevent_setcb, enable / disable, write, read, get_input / get_output, watermarks,
/// set_timeouts, bufferevent_free (also from inside its own callbacks).
///
/// Events, as over a socket: BEV_EVENT_CONNECTED (a connecting stream is up), BEV_EVENT_EOF |
/// BEV_EVENT_READING (the peer shut its side down or freed its end, after its last byte), and
/// BEV_EVENT_ERROR with the reason in EVUTIL_SOCKET_ERROR() (ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT
/// (connecting, keepalive, or a peer that took nothing for connection.creditTimeout), ECONNRESET when the peer's side went away without closing, ENODEV, ESHUTDOWN when the Reactor
/// was destroyed). None after bufferevent_free.
///
/// Under it: a framed connection (credits: the peer never finds its receives exhausted, no RNR),
/// what the program writes in one loop turn going out together, cut at the peer's message size and
/// copied once into a registered buffer. A reader that stops reading (disable(EV_READ), or a read
/// high watermark it does not drain) stops the writer: its receive window fills, the writer's
/// credits run out, and what the writer's program writes stays in its own output evbuffer, whose
/// write watermark and write callback behave as over TCP. Freeing the bufferevent sends what was
/// written before, then closes (the peer reads it all, then EOF); also when the Reactor is
/// destroyed right after, which waits for that up to Reactor::linger() (see Reactor::setLinger).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "evrdma/ConnectionOptions.h"
#include "evrdma/Listener.h"

struct bufferevent;
struct evdns_base;

namespace evrdma {

class Reactor;

struct StreamOptions {
  /// The connection under the stream: `framed` is always on; maxMessageSize is how many bytes one
  /// message carries at most (writes are cut at the smaller of ours and the peer's).
  ClientOptions connection = defaultConnection();
  /// Bytes received and not yet read by the program that the stream holds before the peer must
  /// wait (its credits stop coming back): the reader's bound on buffering, above what its program
  /// keeps in its own input evbuffer.
  size_t receiveWindow = size_t{1} << 20;
  /// What the program's end holds of what it wrote before it stops taking more from it (its
  /// output evbuffer grows past that, as a socket's does when the kernel's buffer is full).
  size_t sendWindow = size_t{256} << 10;
  /// Received messages of at least this many bytes reach the program's input evbuffer without a
  /// copy: their receive buffer itself is added to it (evbuffer_add_reference), and the receive
  /// is posted again at once with a spare buffer in its place; the lent one becomes a spare once
  /// the program has drained its bytes. Below this size (a copy costs less than a lent chain) and
  /// while every spare is lent (a program keeping a partial line), the bytes are copied: nothing
  /// the program keeps holds back the peer. SIZE_MAX: always copy (and no spares registered).
  size_t lendFrom = 1024;
  /// The spare receive buffers (connection.maxMessageSize each, registered with the receive
  /// ring: ConnectionOptions::spareRecvBuffers), which bound the buffers lent at once.
  uint32_t lendingBuffers = 16;

  static ClientOptions defaultConnection() {
    ClientOptions options;
    options.framed = true;
    options.maxMessageSize = 64 << 10;
    options.recvDepth = 16;
    options.sendDepth = 16;
    // A peer that takes none of what waits to go to it for a minute ends the stream (ETIMEDOUT):
    // what it holds of the writer's (its send buffers, its program's output) is bounded in time too.
    options.creditTimeout = std::chrono::seconds(60);
    return options;
  }
};

/// What one stream did and holds (Stream::stats).
struct StreamStats {
  bool connected = false;       ///< up, and not closed
  /// Every send buffer holds a message the peer has no room for yet (sent in place: as many bytes
  /// as may be out at once are): what the program writes waits in its output evbuffer.
  bool waitingForPeer = false;
  /// The receive window is full (the program does not read): the peer's sends wait.
  bool receivingPaused = false;
  size_t heldForProgram = 0;    ///< bytes received that the program has not taken in yet
  uint64_t bytesLent = 0;       ///< bytes received that reached the program in their receive buffer
  uint64_t bytesCopied = 0;     ///< bytes received that were copied on their way to the program
  uint32_t buffersLent = 0;     ///< receive buffers lent to the program now (see lendFrom)
  /// Messages received that went straight into the program's input evbuffer (it was reading, and
  /// nothing was waiting before them); the others went through the bufferevent pair underneath.
  uint64_t messagesStraightIn = 0;
  /// Messages sent that were taken straight from the program's output evbuffer (it could write,
  /// and nothing it wrote before was still on its way down); the others came through the pair.
  uint64_t messagesStraightOut = 0;
  /// Bytes sent straight from the program's output evbuffer chains, without a copy (the program
  /// opted in with useRegisteredMemory(); 0 otherwise).
  uint64_t bytesSentInPlace = 0;
  /// Bytes the program wrote that went down to the stream in their evbuffer chains, moved whole
  /// (not copied on the way): a chain that fits the send window does; a bigger one is cut (copied).
  uint64_t bytesWrittenDownWhole = 0;
  ConnectionStats connection;   ///< the connection's figures (bytes, messages, credit waits...)
};

class Stream {
 public:
  Stream() = delete;
  /// Starts connecting to a numeric `address` and `port` and returns the program's bufferevent at
  /// once (the program frees it with bufferevent_free): set its callbacks and enable it; writes
  /// made before the connection is up go out once it is. The outcome is BEV_EVENT_CONNECTED or
  /// BEV_EVENT_ERROR. Or returns null with `*error` (if given) set to -errno: -EINVAL (not a
  /// numeric address, or unusable options), -ENODEV (no RDMA CM), -ESHUTDOWN, -ENOMEM.
  static bufferevent* connect(Reactor& reactor, const std::string& address, uint16_t port,
                              const StreamOptions& options = {}, int* error = nullptr) noexcept;
  /// As connect, to a host name (or a numeric address) that `dns` looks up, as
  /// bufferevent_socket_connect_hostname does, without blocking the loop (`family`: AF_UNSPEC,
  /// AF_INET or AF_INET6). The bufferevent comes back at once; the connect goes to the first
  /// address found. A failed lookup is BEV_EVENT_ERROR, its EVUTIL_EAI_* error then told by
  /// bufferevent_socket_get_dns_error(bev), as libevent tells it. Null with `*error`: -EINVAL (no
  /// `dns`, an empty name, another family), or as connect.
  static bufferevent* connectHostname(Reactor& reactor, evdns_base* dns, int family, const std::string& host,
                                      uint16_t port, const StreamOptions& options = {}, int* error = nullptr) noexcept;
  /// Half-close: what the program wrote so far goes out, then the peer gets EOF after the last
  /// byte; this side still reads what the peer sends. 0, -EINVAL (not a stream of evrdma's),
  /// -ENOTCONN (closed or failed), -EALREADY (done before).
  static int shutdownWrite(bufferevent* bev) noexcept;
  /// Whether `bev` is a stream's end that evrdma made (and the program has not freed).
  static bool isStream(bufferevent* bev) noexcept;
  /// Opt-in, once per process, best before anything of libevent's is made: libevent's memory
  /// functions (event_set_mem_functions) then take each block of 1 KiB or more (the evbuffer
  /// chains bufferevent_write copies into) from memory evrdma registers with the device on first
  /// use, so streams send what the program wrote straight from its chains, with no second copy
  /// into a send buffer (StreamStats::bytesSentInPlace). Smaller blocks, and memory allocated
  /// before, stay malloc's. The registered memory is kept for reuse (never given back to the
  /// system) and stays pinned while a device is open. 0, or -ENOMEM (nothing changed).
  static int useRegisteredMemory() noexcept;
  /// The stream's figures: 0, or -EINVAL (not a stream of evrdma's).
  static int stats(bufferevent* bev, StreamStats& out) noexcept;
};

struct StreamListenerOptions {
  /// Admission, budgets, drain and workers, as for any Listener. With `workers`, each accepted
  /// stream lives on its worker: its bufferevent is on that worker Reactor's event_base, and the
  /// callback is called on that worker's thread (so it must be thread-safe, and the program uses
  /// each bufferevent on its own worker's thread only). The workers must outlive the listener.
  ListenerOptions listener;
  /// The accepted streams' connection (framed always on) and windows.
  StreamOptions stream;
};

/// Accepts streams: each accepted peer becomes a bufferevent handed to the callback once its
/// connection is up, with the peer's address (the callback owns it from then on); with workers,
/// on the worker's thread and loop (see StreamListenerOptions).
class StreamListener {
 public:
  using Callback = std::function<void(bufferevent* bev, const sockaddr* peer, int peerLength)>;
  struct Release {
    void operator()(StreamListener* listener) const noexcept;
  };
  /// Dropping it stops listening; streams already handed out go on.
  using Ptr = std::unique_ptr<StreamListener, Release>;

  static Ptr create(Reactor& reactor, Callback callback, const StreamListenerOptions& options = {});
  /// As Listener::listen: 0 or -errno (-EINVAL, also for a worker that does not accept posts;
  /// -EADDRINUSE, -ENODEV...).
  int listen(const std::string& address, uint16_t port, int backlog = 0) noexcept;
  uint16_t port() const noexcept;
  /// While disabled, connect requests are refused ("not accepting"), as with an evconnlistener
  /// that does not accept; enable() takes them again.
  void enable() noexcept;
  void disable() noexcept;
  /// Streams accepted and handed out so far.
  uint64_t accepted() const noexcept;

 private:
  class Impl;
  explicit StreamListener(std::unique_ptr<Impl> impl);
  ~StreamListener();
  std::unique_ptr<Impl> impl_;
};

}  // namespace evrdma
