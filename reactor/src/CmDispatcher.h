// CmDispatcher: a non-blocking RDMA CM event channel watched by the reactor. On readiness it reads
// events with rdma_get_cm_event until EAGAIN (at most kReadAhead a turn), copies and acks each at
// once, and queues it; then it hands at most kBudget of the queue to the CmEventHandler in each
// id's context, the rest on later turns, after the loop has polled its other sources and timers.
// It reads ahead because the kernel walks every unread event of the channel on each
// rdma_destroy_id: with thousands of disconnects waiting there, each teardown cost that walk.
// No call here blocks and none spins on EAGAIN.
#pragma once

#include <cstdint>
#include <vector>

#include "CmEvent.h"
#include "CmEventQueue.h"
#include "evrdma/Verbs.h"
#include "NextTurn.h"

struct event;

namespace evrdma {

class Reactor;

class CmDispatcher {
 public:
  // Small: a CM event can cost milliseconds of work in its handler (an agent's teardown, a
  // connect), and a storm of them must not hold the loop's other sources for long.
  static constexpr int kBudget = 16;
  // Reading is cheap beside a teardown: a drain of 25 000 agents empties the kernel's list in a
  // few turns. Past kMostWaiting the kernel keeps them (and its listen backlog counts again).
  static constexpr int kReadAhead = 1024;
  static constexpr size_t kMostWaiting = 1 << 17;

  explicit CmDispatcher(Reactor& reactor) : reactor_(reactor) {}
  ~CmDispatcher();
  CmDispatcher(const CmDispatcher&) = delete;
  CmDispatcher& operator=(const CmDispatcher&) = delete;

  // Creates the channel and starts watching it. Returns 0 or -errno.
  int init() noexcept;

  // A new id on this channel whose events go to `handler`. Returns 0 or -errno.
  int createId(CmEventHandler* handler, rdma_port_space space, CmId& id) noexcept;

  rdma_event_channel* channel() const noexcept { return channel_.get(); }
  Reactor& reactor() const noexcept { return reactor_; }
  uint64_t eventsDispatched() const noexcept { return dispatched_; }
  // Events whose id had no handler, or was destroyed or handed away while they waited (dropped, counted).
  uint64_t eventsWithoutHandler() const noexcept { return orphans_; }
  // Turns that stopped at a budget and left the rest for a later turn.
  uint64_t budgetYields() const noexcept { return budgetYields_; }
  // Events read and waiting for their dispatch now, and the most that ever waited at once.
  size_t eventsWaiting() const noexcept { return waiting_.size(); }
  size_t mostEventsWaiting() const noexcept { return waiting_.mostWaiting(); }
  // Events are waiting, in the queue or the channel, for a later turn.
  bool backlogged() const noexcept { return resume_.scheduled(); }
  // For the Reactor's linger (ReactorCore::lingerStreams), which serves the channel without the loop:
  // its fd, and one turn's reading and dispatching.
  int fd() const noexcept { return channel_ ? channel_->fd : -1; }
  void serveNow() noexcept { drain(); }

  // The id's waiting events in the dispatcher of its channel (if evrdma's) will not be dispatched,
  // counted as orphans when their turn comes: it is being destroyed or handed away. Any thread.
  // Returns the new ids of connect requests waiting for it (if it listens): the caller's to destroy.
  static std::vector<rdma_cm_id*> forgetWaitingEventsOf(rdma_cm_id* id) noexcept;

 private:
  static void onReadable(int, short, void* self) noexcept;
  void drain() noexcept;
  bool readAhead() noexcept;  // true if it stopped before the channel was empty
  void dispatch(CmEvent& event) noexcept;
  void dropOrphan(const CmEvent& event) noexcept;

  Reactor& reactor_;
  CmEventChannel channel_;
  event* event_ = nullptr;
  detail::NextTurn resume_;  // a budget spent: drain again on a later turn
  detail::CmEventQueue waiting_;
  CmDispatcher* nextRegistered_ = nullptr;  // the process's dispatchers (destroyCmId finds an id's)
  uint64_t dispatched_ = 0;
  uint64_t orphans_ = 0;
  uint64_t budgetYields_ = 0;
};

namespace detail {
// rdma_destroy_id, once the id's waiting events are forgotten (and, for a listening id, the ids
// of the connect requests that wait for it destroyed). Every id evrdma destroys goes through here
// (CmIdDeleter too). Any thread.
int destroyCmId(rdma_cm_id* id) noexcept;
}  // namespace detail

}  // namespace evrdma
