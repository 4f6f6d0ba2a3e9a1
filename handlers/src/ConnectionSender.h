// ConnectionSender: one connection's sending: the copy path (postSend), the zero-copy operations
// and the checks they pass before anything is posted, batches, the region-exchange calls, and each
// send completion routed to the application's onSendDone / onOpDone. A request goes through the
// FramedSender (framed) or straight to the SendQueue; onWritable comes once everything that had
// to wait went out. A part of ConnectionCore.
#pragma once

#include <cstddef>
#include <cstdint>

#include <infiniband/verbs.h>

#include "evrdma/Callbacks.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma {

class ConnectionCore;
struct SendOp;

namespace detail {

class ConnectionSender {
 public:
  explicit ConnectionSender(ConnectionCore& core) : c_(core) {}

  // Connection::postSend / postSendWithImm: copied into one of evrdma's send buffers.
  int copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  // A send buffer for a message of `length` bytes: its slot, and where its bytes go (`data`);
  // -ENOBUFS (none free: onWritable follows), -ENOTCONN, -EMSGSIZE, -EOPNOTSUPP. sendTaken sends
  // it; nothing else gives it back.
  int takeSendBuffer(size_t length, bool hasImm, uint8_t*& data) noexcept;
  int sendTaken(int slot, uint8_t* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  // Connection::sendReceived: `length` bytes of payload sent from receive buffer `buffer` (a
  // framed message's header rewritten in place), which becomes a spare again when the send completes.
  int sendReceiveBuffer(uint32_t buffer, size_t length, uint64_t tag) noexcept;
  // A stream's bytes sent as one message straight from memory registered under `lkey` on the
  // connection's protection domain (RegisteredHeap): 0, -ENOTCONN, -EMSGSIZE. Completion:
  // onOpDone(tag), after which the memory is the caller's again.
  int sendRegistered(const uint8_t* data, size_t length, uint32_t lkey, uint64_t tag) noexcept;
  // Connection::send, rdmaWrite, rdmaRead...: checked, then sent from the application's memory.
  int checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset, bool hasImm,
                    uint32_t imm, uint64_t tag) noexcept;
  // To the send queue (unframed); a failed post fails the connection on a later turn.
  int submit(const SendOp& op) noexcept;
  // What the FramedSender returned for a message of the program's (`rc`, a failed post's -errno
  // or 0): a failure fails the connection on a later turn, and what had to wait is noted for
  // onWritable. Returns `rc`.
  int framedPosted(int rc) noexcept;
  // What evrdma's own frames, or the FramedSender's pump, posted: a failure fails the connection
  // on a later turn. Nothing of the program's joins the backlog there (the pump only moves what
  // waited, noted when it was sent), so the backlog is not asked. Returns `rc`.
  int ownPosted(int rc) noexcept;
  void beginBatch() noexcept;
  int endBatch() noexcept;
  int requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept;
  int sendRegion(const MemoryRegion& region, uint64_t tag) noexcept;
  int releaseRegion(const RemoteRegion& region) noexcept;

  // A completion of a send, write or read.
  void onCompletion(const ibv_wc& wc) noexcept;
  // Something had to wait: onWritable once it all went out.
  void noteBacklog() noexcept;
  void notifyWritableIfDrained() noexcept;
  // Requests waiting: behind a full send queue, or (framed) for credits.
  size_t backlog() const noexcept;
  SendQueueStats queueStats() const noexcept;

 private:
  // `fill(to)` writes the message's bytes; a template, so postSend's memcpy is inlined, not a call
  // through a pointer per message.
  template <typename Filler>
  int copyIn(size_t length, Filler&& fill, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  // What takeSendBuffer and sendTaken do, inlined into copyIn.
  int acquireSendBuffer(size_t length, bool hasImm, uint8_t*& data) noexcept;
  int sendAcquired(int slot, uint8_t* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  // A message of `length` bytes in `buffer` (after room for the frame header, framed: written
  // here) sent from there; `op` says whose buffer it is (lkey, slot), its tag and immediate.
  int sendMessageIn(SendOp& op, uint8_t* buffer, size_t length) noexcept;
  // Framed or not, the request goes its way (waiting for credits, or to the send queue).
  int dispatch(const SendOp& op, uint8_t* copiedHeader) noexcept;
  void failedCompletion(const SendOp& op, ibv_wc_status status) noexcept;
  // The buffer a completed copy or forward used is free again.
  void releaseBuffer(const SendOp& op) noexcept;

  ConnectionCore& c_;
  bool backlogged_ = false;  // something had to wait: onWritable once it all went out
};

}  // namespace detail
}  // namespace evrdma
