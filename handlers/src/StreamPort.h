// StreamPort: what a byte stream needs of the connection under it, and nothing more: sending a
// buffer the stream fills, lending the receive buffers the peer's bytes arrived in, failing with a
// reason, and whether its close is done with the peer. A stream reaches its connection through
// this and the connection's public API (evrdma/Connection.h: batches, pausing, sizes, close,
// figures) only; the connection's parts (ConnectionCore.h) stay the connection's, and a change to
// them reaches streams here or nowhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace evrdma {
class Connection;
}

namespace evrdma::detail {

class ReceiveLoan;

class StreamPort {
 public:
  // Copies `length` bytes from `source` into `to` (the stream drains its evbuffer so).
  using Fill = void (*)(void* source, uint8_t* to, size_t length);

  explicit StreamPort(Connection& connection) noexcept : connection_(connection) {}

  // A message of `length` bytes (0: the FIN), filled by `fill` straight into a registered send
  // buffer and sent framed. 0, -ENOBUFS (every send buffer is in use: onWritable follows once one
  // is free), or the connection's -errno (it fails: onError follows).
  int send(size_t length, Fill fill, void* source, uint64_t tag) noexcept;
  // Received messages of at least `bytes` may be lent (lendDelivering) instead of copied.
  void lendFrom(size_t bytes) noexcept;
  // The message being delivered (from onRecv), lent out of the ring in exchange for a spare
  // buffer; null once every spare is lent (the caller copies).
  ReceiveLoan* lendDelivering() noexcept;
  // Receive buffers lent now.
  uint32_t buffersLent() const noexcept;
  // Fails the connection with -errno `err`, `why` naming what failed (onError, onClosed follow).
  void fail(int err, const char* why) noexcept;
  // The close has got as far as the peer will take it (disconnected, or given up on).
  bool doneWithPeer() const noexcept;

 private:
  Connection& connection_;
};

}  // namespace evrdma::detail
