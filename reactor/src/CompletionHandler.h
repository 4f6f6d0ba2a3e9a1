// CompletionHandler: what a completion dispatcher hands out to the owner of a QP (a connection):
// its work completions, a poll at a time, and what went wrong with its QP, its CQ or its device.
// Every call is noexcept (they run under libevent's C frames) and may close the connection: a
// handler is destroyed only on a later turn.
#pragma once

#include "evrdma/Verbs.h"

namespace evrdma {

class CompletionHandler {
 public:
  virtual void onCompletion(const ibv_wc& wc) noexcept = 0;
  // An asynchronous error event of the device about this handler's QP (QP_FATAL, QP_REQ_ERR,
  // QP_ACCESS_ERR, PATH_MIG_ERR), its CQ (CQ_ERR) or the whole device (DEVICE_FATAL).
  virtual void onAsyncError(ibv_event_type type) noexcept = 0;
  // The shared CQ itself failed (ibv_req_notify_cq or ibv_poll_cq returned an error): its
  // completions can no longer be trusted to arrive. `err` is -errno, `op` the call.
  virtual void onCompletionQueueError(int err, const char* op) noexcept = 0;
  // The device is being removed: nothing posted will come back, and its resources must go.
  virtual void onDeviceRemoved() noexcept = 0;
  // Completions are handed out a poll at a time: before this handler's first completion of a poll
  // comes onPollBegin, and once the poll's last completion was handed out, onPollEnd, so that work
  // requests posted from its callbacks go to the device together (one doorbell, one signaled).
  // `receives`: how many receive completions the poll found, for all handlers: with one message in
  // a poll there is little to batch, and its answer may be awaited.
  virtual void onPollBegin(int receives) noexcept { (void)receives; }
  virtual void onPollEnd() noexcept {}
  // All `n` completions of a poll are this handler's: the same three steps in one call (one
  // virtual call per poll on the ping-pong shape's short way, where a handler can make its own
  // calls direct).
  virtual void onPoll(const ibv_wc* wcs, int n, int receives) noexcept = 0;

 protected:
  ~CompletionHandler() = default;
};

}  // namespace evrdma
