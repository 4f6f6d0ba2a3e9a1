// StreamPort: what a byte stream needs of the connection under it, and nothing more: sending a
// buffer the stream fills, lending the receive buffers the peer's bytes arrived in, failing with a
// reason, and whether its close is done with the peer. A stream reaches its connection through
// this and the connection's public API (evrdma/Connection.h: batches, pausing, sizes, close,
// figures) only; the connection's parts (ConnectionCore.h) stay the connection's, and a change to
// them reaches streams here or nowhere.
#pragma once

#include <cstddef>
#include <cstdint>

struct ibv_pd;

namespace evrdma {
class Connection;
}

namespace evrdma::detail {

class ReceiveLoan;

// What a stream takes from its connection's receive path, handed down with each message: the
// bytes, and for a message of at least lendFrom bytes, while a spare buffer is free, the loan of
// the receive buffer they are in (`loan`, else null): the stream takes it (evbuffer_add_reference
// with ReceiveLoan::giveBack), or gives it back at once and copies. Its answer says whether the
// connection goes on delivering: false, and receiving pauses (the stream's window is full) once
// the call has returned. Nothing of the connection is called back while it runs.
class StreamReceiver {
 public:
  virtual bool onStreamBytes(Connection& c, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept = 0;

 protected:
  ~StreamReceiver() = default;
};

class StreamPort {
 public:
  // A registered send buffer taken for one message: the stream writes its bytes at `data`.
  struct SendSpace {
    uint8_t* data = nullptr;
    int slot = -1;
  };

  explicit StreamPort(Connection& connection) noexcept : connection_(connection) {}

  // Takes a send buffer for a message of `length` bytes (0: the FIN): 0, -ENOBUFS (every send
  // buffer is in use: onWritable follows once one is free), or -errno (not connected, too long).
  int takeSendSpace(size_t length, SendSpace& space) noexcept;
  // Sends the `length` bytes the stream wrote into `space` as one framed message: 0, or the
  // connection's -errno (it fails: onError follows). The buffer is the connection's again.
  int send(const SendSpace& space, size_t length, uint64_t tag) noexcept;
  // Sends `length` bytes as one framed message straight from where they are, memory registered
  // under `lkey` on protectionDomain(): 0, or -errno. The connection's handler hears
  // onOpDone(tag) once (also when the connection ends first); until then the bytes stay put.
  int sendInPlace(const uint8_t* data, size_t length, uint32_t lkey, uint64_t tag) noexcept;
  ibv_pd* protectionDomain() const noexcept;
  // The connection's messages go to `receiver` from now on, in place of its handler's onRecv;
  // those of at least `lendFrom` bytes (0: none) come with the loan of their receive buffer
  // while a spare is free (a receive takes the spare in its place), else null (the caller copies).
  void deliverTo(StreamReceiver& receiver, size_t lendFrom) noexcept;
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
