// SendQueue: a connection's send-side work requests. It never overflows the QP's send queue: what
// does not fit waits in a backlog, in order, and goes out as completions free room. It signals
// only every Nth work request, and always the last one of each post, so every request still gets
// its completion: RC completes in order, so one signaled completion completes every unsignaled
// request before it. Requests issued between beginBatch() and endBatch() are posted as one linked
// list. The verbs call is injected, so the logic is testable without a device.
//
// Per message it allocates nothing: the requests in flight sit in a ring sized to the QP's send
// queue, a request that finds no backlog and room is posted at once without queuing, a batch's
// requests wait for its end in the ring's free slots, and the backlog (what finds no room) is a
// ring that keeps its storage, made only when first needed (it grew to 8 requests, 704 B, in every
// connection that answered a message inside a completion pass).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "Ring.h"
#include "WorkRequestId.h"
#include "evrdma/Callbacks.h"  // OpType

namespace evrdma {

struct SendOp {
  OpType type = OpType::Send;
  uint64_t tag = 0;
  ibv_sge header{};            // Send only: evrdma's frame header, sent before `sge` (length 0: none)
  ibv_sge sge{};               // local buffer (addr, length, lkey)
  uint64_t remoteAddress = 0;  // Write, WriteWithImm, Read
  uint32_t rkey = 0;
  bool hasImm = false;         // Send (with immediate), WriteWithImm
  uint32_t imm = 0;            // host byte order
  int32_t copySlot = -1;       // the connection's send buffer this op uses, if any
  int32_t frameSlot = -1;      // the connection's frame-header slot this op uses, if any
  bool internal = false;       // a frame of evrdma's own protocol: no application callback
  bool forwarded = false;      // copySlot is a receive buffer (Connection::sendReceived), not a send buffer
  uint32_t sequence = 0;       // set by the queue
  bool signaled = false;       // set by the queue
};

// Where a FramedSender's frames go: a connection's SendQueue (down to the device, or behind a full
// send queue), or a unit test's fake. What a failed post means is for the caller of FramedSender.
class FrameOutlet {
 public:
  virtual int submit(const SendOp& op) noexcept = 0;

 protected:
  ~FrameOutlet() = default;
};

class SendQueue final : public FrameOutlet {
 public:
  using Post = std::function<int(ibv_send_wr* first, ibv_send_wr** bad)>;
  using Done = std::function<void(const SendOp& op, ibv_wc_status status)>;
  // `depth`: the QP's max_send_wr; `signalEvery`: N (>= 1); `maxInline`: the QP's max_inline_data;
  // `serial`: the CQ attachment's, carried in every wr_id (see WorkRequestId.h).
  SendQueue(uint32_t depth, uint32_t signalEvery, uint32_t maxInline, uint32_t serial, Post post);
  // Posting to `qp` itself (a connection's): no call through a std::function per post.
  SendQueue(uint32_t depth, uint32_t signalEvery, uint32_t maxInline, uint32_t serial, ibv_qp* qp);

  // Queues `op` and posts what fits. Returns 0, or the -errno of a failed ibv_post_send (the QP is
  // then unusable: the connection fails).
  int submit(const SendOp& op) noexcept override;
  // Batches nest: requests go out when the outermost batch ends. `firstAtOnce`: the batch's first
  // request, if nothing waits and there is room, is posted at once (the batch of a poll that found
  // one message: that request is usually its only one, an answer someone is waiting for). An
  // inner batch turns it off: the application batches on purpose.
  void beginBatch(bool firstAtOnce = false) noexcept {
    firstAtOnce_ = batchDepth_ == 0 && firstAtOnce;
    ++batchDepth_;
  }
  int endBatch() noexcept;

  // A send-side completion: hands every request it completes to `done`, in posting order
  // (unsignaled ones before it succeeded: RC completes in order), then posts from the backlog.
  // Returns the -errno of a failed post, else 0.
  // A template, not a Done: the connection's callback is inlined, no std::function call per message.
  template <typename Callback>
  int complete(const ibv_wc& wc, Callback&& done) noexcept {
    const uint32_t sequence = detail::wrid::index(wc.wr_id);
    if (!holds(sequence)) return 0;  // already completed (a flush of a request counted before)
    while (inFlightCount_ > 0) {
      // Not a copy: `done` may post, but the slot it leaves is reused only once the ring holds
      // depth_ + 1 requests, one more than ever are in flight (see inFlight_).
      const SendOp& op = popInFlight();
      const bool isThis = op.sequence == sequence;
      done(op, isThis ? wc.status : IBV_WC_SUCCESS);
      if (isThis) break;
    }
    return pump();
  }

  size_t inFlight() const noexcept { return inFlightCount_; }
  // Requests waiting for room in the QP's send queue (not those a batch holds that fit).
  size_t backlog() const noexcept {
    const size_t room = depth_ - inFlightCount_ - staged_;
    return backlog_.size() > room ? backlog_.size() - room : 0;
  }
  uint32_t maxInline() const noexcept { return maxInline_; }
  uint64_t posts() const noexcept { return posts_; }          // ibv_post_send calls
  uint64_t signaled() const noexcept { return signaledCount_; }
  uint64_t requests() const noexcept { return requests_; }
  // Takes what was never posted (the connection is closing).
  std::deque<SendOp> takeBacklog() noexcept;
  // Takes what was posted but never completed (the QP is gone), in posting order.
  std::deque<SendOp> takeInFlight() noexcept;

 private:
  // Posts what a batch staged, and what waits in the backlog and fits.
  int pump() noexcept { return staged_ == 0 && backlog_.empty() ? 0 : pumpWaiting(); }
  int pumpWaiting() noexcept;
  // The ring slot `i` places after the newest request in flight (staged requests sit there).
  SendOp& slotAfterInFlight(size_t i) noexcept { return inFlight_[(inFlightHead_ + inFlightCount_ + i) % inFlight_.size()]; }
  // The request with `sequence` is in flight. Those in flight hold rising sequence numbers in the
  // ring's order (a failed post may leave a gap, never posted, so never completed): a range check.
  bool holds(uint32_t sequence) const noexcept {
    if (inFlightCount_ == 0) return false;
    const uint32_t oldest = inFlight_[inFlightHead_].sequence;
    const uint32_t newest = inFlight_[(inFlightHead_ + inFlightCount_ - 1) % inFlight_.size()].sequence;
    return sequence - oldest <= newest - oldest;  // unsigned: sequence numbers wrap
  }
  // Fills `wr` (and its two `sges`) for `op`; `last` ends the post's list.
  void prepare(SendOp& op, ibv_send_wr& wr, ibv_sge* sges, bool last, size_t inFlightAfter) noexcept;
  int post(ibv_send_wr* first) noexcept;
  void noteInFlight(const SendOp& op) noexcept;  // `op`, in the ring's next slot already, is in flight
  // The oldest in flight, no longer counted; it stays where it is until depth_ more are posted.
  const SendOp& popInFlight() noexcept {
    const SendOp& op = inFlight_[inFlightHead_];
    inFlightHead_ = inFlightHead_ + 1 == inFlight_.size() ? 0 : inFlightHead_ + 1;
    --inFlightCount_;
    return op;
  }

  uint32_t depth_, signalEvery_, maxInline_;
  uint32_t serial_;
  Post post_;       // tests inject the verbs call
  ibv_qp* qp_ = nullptr;  // or it is ibv_post_send on this QP
  // A ring of depth_ + 1 entries (inFlightHead_ is the oldest): the one a completion just left is
  // not written while its callback reads it, whatever the callback posts.
  std::vector<SendOp> inFlight_;
  size_t inFlightHead_ = 0, inFlightCount_ = 0;
  // A batch's requests that fit, in the ring's slots after those in flight, not prepared yet;
  // in flight + staged never pass depth_, so the slot a completion just left is never among them.
  size_t staged_ = 0;
  detail::Ring<SendOp> backlog_;
  std::vector<ibv_send_wr> wrs_;  // depth_ entries, reused for each post
  std::vector<ibv_sge> sges_;     // two per request: header and body
  uint32_t nextSequence_ = 0;
  uint32_t sinceSignal_ = 0;
  uint32_t batchDepth_ = 0;
  bool firstAtOnce_ = false;
  uint64_t posts_ = 0, signaledCount_ = 0, requests_ = 0;
};

}  // namespace evrdma
