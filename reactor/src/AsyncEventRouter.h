// AsyncEventRouter: a device's async events (QP fatal, CQ error, device fatal) come from one fd
// per device context, shared by the whole process: with two Reactors on the same device, either
// may read an event about the other's QP. The router knows which Reactor owns each QP, CQ and SRQ, and
// hands an event read by the wrong one to its owner, across threads: into the owner's inbox,
// with a wake-up on an eventfd the owner's loop watches. Every call is thread-safe.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace evrdma::detail {

// What an event says, copied before it is acked.
struct AsyncEventCopy {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  uint32_t qpNum = 0;   // QP events
  ibv_cq* cq = nullptr;  // CQ_ERR
  ibv_srq* srq = nullptr;  // SRQ_LIMIT_REACHED, SRQ_ERR
};

class AsyncInbox {
 public:
  virtual ~AsyncInbox() = default;
  // Called on any thread, with the router's lock held: queue it and wake your loop.
  virtual void post(const AsyncEventCopy& event) noexcept = 0;
};

class AsyncEventRouter {
 public:
  static AsyncEventRouter& instance();

  void addInbox(ibv_context* context, AsyncInbox* inbox);
  void removeInbox(AsyncInbox* inbox) noexcept;
  void ownQp(uint32_t qpNum, ibv_context* context, AsyncInbox* inbox);
  void disownQp(uint32_t qpNum, ibv_context* context, AsyncInbox* inbox) noexcept;
  void ownCq(ibv_cq* cq, AsyncInbox* inbox);
  void disownCq(ibv_cq* cq) noexcept;
  void ownSrq(ibv_srq* srq, AsyncInbox* inbox);

  // `reader` read `event` from `context`'s fd: true if it was handed to another inbox (or, for
  // device-wide events, to every other inbox on the context), false if it is the reader's own.
  bool forward(ibv_context* context, AsyncInbox* reader, const AsyncEventCopy& event) noexcept;
  // The device of `context` is going away: every inbox on it but `except` (null: all) hears it as
  // a device-wide event, so that a Reactor with no CM id on the device lets go of it too.
  void announceRemoval(ibv_context* context, AsyncInbox* except) noexcept {
    AsyncEventCopy removal;
    removal.type = IBV_EVENT_DEVICE_FATAL;
    (void)forward(context, except, removal);
  }

 private:
  // A QP of a device context, hashed: every connection's QP is entered and removed once (a tree
  // of 25 000 was 1.2 % of a server's CPU while they connected).
  struct QpKey {
    ibv_context* context;
    uint32_t qpNum;
    bool operator==(const QpKey& other) const noexcept { return context == other.context && qpNum == other.qpNum; }
  };
  struct QpKeyHash {
    size_t operator()(const QpKey& key) const noexcept {
      return std::hash<const void*>()(key.context) ^ (static_cast<size_t>(key.qpNum) * 0x9E3779B97F4A7C15ull);
    }
  };

  std::mutex mutex_;
  std::multimap<ibv_context*, AsyncInbox*> inboxes_;
  std::unordered_map<QpKey, AsyncInbox*, QpKeyHash> qps_;
  std::map<const void*, AsyncInbox*> objects_;  // CQs and SRQs
};

}  // namespace evrdma::detail
