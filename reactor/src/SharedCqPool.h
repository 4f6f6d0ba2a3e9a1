// SharedCqPool: a device's CQs, shared by every connection on it (a CQ per connection runs out of
// resources fast: soft-iWARP, for one, maps each CQ into the process and allows 144 pages), and
// who is on them. A QP reserves the CQ entries it may need (its send + receive depth), so a shared
// CQ cannot overflow; its completions are found by its qp_num, and belong to it only if their
// wr_id carries its reservation's serial, so what a destroyed QP left behind never reaches a newer
// QP that got the same number. Receives through a shared receive queue carry the SRQ's serial.
//
// It keeps the books and nothing else: the completion channel, the polling passes and the drained
// callbacks are the CompletionDispatcher's, which owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "AsyncEventRouter.h"
#include "FlaggedList.h"
#include "CompletionHandler.h"
#include "SharedReceiveQueue.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/Verbs.h"

namespace evrdma::detail {

// One CQ of the pool.
struct SharedCq {
  CompletionQueue cq;
  uint32_t capacity = 0;
  uint32_t reserved = 0;
  uint64_t handedOut = 0;         // completions polled from it, ever
  bool queued = false;            // waiting in the dispatcher's ready line
  bool needsArm = false;          // an event was taken from it since it was last armed
  bool firstPoll = false;         // the next poll is the first after a wake-up (for the stats)
  bool foundBeforeRead = false;   // the poll before the channel's read found completions
  bool recent = false;            // in the dispatcher's list of CQs that handed out completions lately
  bool roomy = false;             // in the pool's list of CQs that may have entries free
};

// One QP's place on a shared CQ.
struct CqReservation {
  SharedCq* cq = nullptr;
  uint32_t entries = 0;
  uint32_t serial = 0;
  CompletionHandler* handler = nullptr;
  uint32_t qpNum = 0;
  bool bound = false;                   // qpNum is known and routed
  SharedReceiveQueue* srq = nullptr;    // it receives through this SRQ
};

class SharedCqPool {
 public:
  static constexpr uint32_t kSharedCqEntries = 512;

  SharedCqPool(ibv_context* context, int maxCqe, CompletionStats& stats, AsyncInbox& inbox)
      : context_(context), maxCqe_(maxCqe), stats_(stats), inbox_(inbox) {}
  SharedCqPool(const SharedCqPool&) = delete;
  SharedCqPool& operator=(const SharedCqPool&) = delete;

  // A CQ with `entries` free, made (on `channel`, armed) if none has them; its entries are
  // reserved. Null + -errno (-EINVAL: more than the device's CQs hold). O(1) amortized, however
  // many CQs there are: the CQs with entries free wait in a list, the one freed into last first;
  // one found too full for a request leaves it until a reservation on it lets go (so a CQ with a
  // few entries free may wait for that while a new CQ is made: connections of a Reactor mostly
  // reserve alike).
  SharedCq* reserve(uint32_t entries, ibv_comp_channel* channel, int& error);
  // The reservation lets go of its entries, and its QP of its route. True if that left a CQ
  // with nothing reserved while others remain (releaseIdle may then destroy it).
  bool unreserve(CqReservation& reservation) noexcept;
  // Routes the completions of `reservation.qpNum` to it; call once the QP exists.
  void bind(CqReservation& reservation, uint32_t qpNum) noexcept;
  size_t reservations() const noexcept { return reservations_; }

  // The reservation bound to `qpNum`, or null; the last one found is kept, since consecutive
  // completions are mostly of one QP (a hash lookup per completion is a good part of a small
  // message's cost).
  CqReservation* boundTo(uint32_t qpNum) noexcept {
    if (last_ != nullptr && last_->qpNum == qpNum) return last_;
    return find(qpNum);
  }
  // Receive completions that carry `srq`'s serial come from it. The SRQ outlives every QP
  // receiving through it (forgetSharedReceiveQueues).
  void routeReceivesOf(SharedReceiveQueue* srq) { srqs_.push_back(srq); }
  void forgetSharedReceiveQueues() noexcept { srqs_.clear(); }
  bool hasSharedReceiveQueues() const noexcept { return !srqs_.empty(); }
  SharedReceiveQueue* sharedReceiveQueueWithSerial(uint32_t serial) const noexcept;
  uint32_t takeSerial() noexcept;  // for a reservation or an SRQ: 1 .. kSerialMask, then again

  // The handlers of the bound reservations that `matches`, copied: calling them may change the map.
  template <typename Predicate>
  std::vector<CompletionHandler*> handlersWhere(Predicate matches) const {
    std::vector<CompletionHandler*> handlers;
    for (const auto& [qpNum, reservation] : byQpNum_)
      if (matches(*reservation)) handlers.push_back(reservation->handler);
    return handlers;
  }

  size_t size() const noexcept { return cqs_.size(); }
  SharedCq& operator[](size_t i) noexcept { return *cqs_[i]; }
  // Destroys the CQs nothing is reserved on but one, kept as a spare: a server's CQs follow its
  // connections down after a peak, and one connection coming and going at a CQ's boundary does
  // not make and destroy a CQ each time. `drain(cq)` first hands out what each still holds (a
  // receive through an SRQ goes back to it); `forget(cq)` takes it off the dispatcher's lines.
  template <typename Drain, typename Forget>
  void releaseIdle(Drain drain, Forget forget) noexcept;
  // Every CQ (each acks its events first) and every route: the device's verbs are going.
  void clear() noexcept;

 private:
  CqReservation* find(uint32_t qpNum) noexcept;
  void destroy(size_t index) noexcept;

  ibv_context* context_;
  int maxCqe_ = 0;
  CompletionStats& stats_;
  AsyncInbox& inbox_;
  std::vector<std::unique_ptr<SharedCq>> cqs_;
  FlaggedList<SharedCq, &SharedCq::roomy> roomy_;  // CQs that may have entries free
  std::vector<SharedReceiveQueue*> srqs_;  // the Device's, whose receives come through here
  std::unordered_map<uint32_t, CqReservation*> byQpNum_;
  CqReservation* last_ = nullptr;  // boundTo's last find; reset whenever byQpNum_ changes
  uint32_t nextSerial_ = 1;
  size_t reservations_ = 0;
};

template <typename Drain, typename Forget>
void SharedCqPool::releaseIdle(Drain drain, Forget forget) noexcept {
  bool spareKept = false;
  for (size_t i = 0; i < cqs_.size();) {
    SharedCq& cq = *cqs_[i];
    if (cq.reserved != 0 || !spareKept) {
      spareKept = spareKept || cq.reserved == 0;
      ++i;
      continue;
    }
    // No QP uses it (a connection's QP is destroyed before it lets go); an event of it still
    // unread on the channel goes with it (the kernel drops a destroyed CQ's pending events).
    drain(cq);
    forget(cq);
    destroy(i);
  }
}

}  // namespace evrdma::detail
