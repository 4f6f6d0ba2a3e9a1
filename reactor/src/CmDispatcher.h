// CmDispatcher: a non-blocking RDMA CM event channel watched by the reactor. On readiness it takes
// events with rdma_get_cm_event until EAGAIN (at most kBudget per turn; the rest on a later turn,
// after the loop has polled its other sources and timers), copies each into a CmEvent, acks it, then hands it to the CmEventHandler in
// the id's context. No call here blocks and none spins on EAGAIN.
#pragma once

#include <cstdint>

#include "CmEvent.h"
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
  // Events whose id had no handler (dropped, counted).
  uint64_t eventsWithoutHandler() const noexcept { return orphans_; }
  // Turns that stopped at the budget and left the rest for a later turn.
  uint64_t budgetYields() const noexcept { return budgetYields_; }
  // Events are waiting in the channel for a later turn (the last drain stopped at the budget).
  bool backlogged() const noexcept { return resume_.scheduled(); }
  // For the Reactor's linger (ReactorCore::lingerStreams), which serves the channel without the loop:
  // its fd, and one drain of what it holds.
  int fd() const noexcept { return channel_ ? channel_->fd : -1; }
  void serveNow() noexcept { drain(); }

 private:
  static void onReadable(int, short, void* self) noexcept;
  void drain() noexcept;

  Reactor& reactor_;
  CmEventChannel channel_;
  event* event_ = nullptr;
  detail::NextTurn resume_;  // budget spent: drain again on a later turn
  uint64_t dispatched_ = 0;
  uint64_t orphans_ = 0;
  uint64_t budgetYields_ = 0;
};

}  // namespace evrdma
