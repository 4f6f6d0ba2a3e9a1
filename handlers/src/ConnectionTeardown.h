// ConnectionTeardown: how one connection ends, through the closing phases of its life
// (ConnectionLife.h): a failure reported once, then the close in two steps (rdma_disconnect; once
// DISCONNECTED and every flushed work request are back, or disconnectTimeout ran out, every
// resource released and onClosed as the last callback, on a later turn), the device going away
// under it, and the Reactor going first. Every way to the end goes through finish(). A part of
// ConnectionCore.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <infiniband/verbs.h>

#include "SendQueue.h"
#include "evrdma/Watch.h"

namespace evrdma {

class ConnectionCore;
struct CmEvent;

namespace detail {

class ConnectionTeardown {
 public:
  explicit ConnectionTeardown(ConnectionCore& core);

  bool closing() const noexcept;
  bool finished() const noexcept;
  // Disconnected, with every posted request back (or given up on): nothing more comes or goes.
  bool doneWithPeer() const noexcept;
  // The outcome: the connection failed (onError was or will be said), whatever its phase.
  bool failed() const noexcept { return failed_; }
  // The -errno the connection failed with (what onError said), 0 while it has not failed.
  int error() const noexcept { return error_; }

  // The application's close(): safe from anywhere, more than once.
  void close() noexcept;
  // Reports an asynchronous failure (unless closing), then the close; final state Failed.
  void fail(int err, const char* op) noexcept;
  // fail() for an error met inside a call of the application's: it gets the error as the return
  // value, and onError comes on a later turn (before onClosed).
  void failLater(int err, const char* op) noexcept;
  // A CM event once closing: only the end of the disconnect matters, or the device going away.
  void onCmEvent(const CmEvent& event) noexcept;
  // The peer's side is gone (DISCONNECTED, its completions handed out): ours follows.
  void peerDisconnected() noexcept;
  // The peer's DISCONNECTED came before the connection was up: the close that follows answers it
  // at once (no ESTABLISHED will come to wait for).
  void notePeerGone() noexcept { disconnectDone_ = true; }
  // Finishes once closing, disconnected, and every posted request is back (cheap otherwise: it
  // runs after every completion).
  void maybeFinish() noexcept;
  // Work flushed while the connection was up (see kUnexplainedFlushGrace).
  void noteUnexplainedFlush() noexcept;
  // Reports an operation that will never complete normally (flushed, or dropped unposted).
  void reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept;
  // DEVICE_REMOVAL for this connection's id: every connection on the device is told.
  void onDeviceGone() noexcept;
  // The device is going away: onError(-ENODEV), and the end comes at once (no flush will come).
  void onDeviceRemoved() noexcept;
  // The Reactor is gone: released without a word to the application (may free the connection).
  void onReactorGone() noexcept;
  // The queue pair first, then what used it; every resource the connection holds (by finish(),
  // and by the connection's destructor in case nothing finished it).
  void releaseResources() noexcept;

 private:
  // How a connection ends: told (onClosed, then the owner frees it), or silently, the Reactor
  // gone (nothing of the application's or the Reactor's is touched).
  enum class Ending : uint8_t { Told, Orphaned };

  // Starts the close (once): what waits is dropped, the peer is told, the end is scheduled.
  void begin() noexcept;
  void disconnect() noexcept;  // rdma_disconnect, once the close has begun
  void scheduleFinish() noexcept;
  // The one end of every connection: resources released, the last word said (or not: Orphaned).
  void finish(Ending ending) noexcept;
  void logFailure(int err, const char* op) const noexcept;
  bool onIwarp() const noexcept;
  // iWARP: the CQ drained past our close's DISCONNECTED; what is still posted never returns.
  void postedWorkNeverReturns() noexcept;

  // Work flushed while the connection was up: the QP went to the error state. A disconnect that
  // follows (iWARP may flush before DISCONNECTED) explains it; if none comes within this, the
  // connection fails (rxe moves a QP to the error state and says nothing else, e.g. after a peer's
  // refused RDMA access).
  static constexpr std::chrono::milliseconds kUnexplainedFlushGrace{2000};

  ConnectionCore& c_;  // its life_ is the phase
  bool failed_ = false;
  // DISCONNECTED seen, rdma_disconnect refused, or no disconnect needed (may come before close())
  bool disconnectDone_ = false;
  // iWARP, the peer gone and the CQ drained past it: what is still posted never comes back (see
  // postedWorkNeverReturns), and the close waits no more.
  bool flushedAll_ = false;
  bool deviceGone_ = false;
  bool closeRequested_ = false;  // the application called close()
  int error_ = 0;
  std::string laterErrorText_;   // keeps failLater's `op` alive until its deferred onError
  std::vector<SendOp> dropped_;  // never posted: reported as flushed before onClosed
  Timer disconnectTimer_;
  Timer unexplainedFlushTimer_;
};

}  // namespace detail
}  // namespace evrdma
