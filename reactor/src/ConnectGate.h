// ConnectGate: how many of a Reactor's clients have a connect request on the wire at once
// (Reactor::setMaxConnectsInFlight). A burst of thousands of connect requests overflows the
// receive queues of the peers' connection managers (InfiniBand/RoCE CM messages go through one
// queue pair per port): the lost requests are re-sent only after the CM's response timeout,
// seconds later. Past the limit a client waits, in order, until one in flight is answered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace evrdma {
class Reactor;
}

namespace evrdma::detail {

class ConnectGate {
 public:
  class Waiter {
   public:
    // Its turn: it may send its connect request now.
    virtual void onConnectTurn() noexcept = 0;

   protected:
    ~Waiter() = default;
  };

  // Owned by `reactor`, whose deferred closures never run once it is dying.
  explicit ConnectGate(Reactor& reactor) : reactor_(reactor) {}
  ConnectGate(const ConnectGate&) = delete;
  ConnectGate& operator=(const ConnectGate&) = delete;

  void setLimit(uint32_t limit) noexcept;  // 0: no limit
  uint32_t limit() const noexcept { return limit_; }
  uint32_t inFlight() const noexcept { return inFlight_; }
  size_t waiting() const noexcept { return waiting_.size(); }

  // True: `waiter` holds a slot and may connect now. False: it waits; onConnectTurn follows (on a
  // later callback, never from inside this call), unless it leaves first.
  bool enter(Waiter* waiter);
  // `waiter` no longer needs its slot (answered, failed, closed), or no longer waits. Safe to call
  // more than once, and for a waiter that never entered.
  void leave(Waiter* waiter) noexcept;

 private:
  void admitLater() noexcept;
  void admit() noexcept;

  Reactor& reactor_;
  uint32_t limit_ = 64;
  uint32_t inFlight_ = 0;
  std::deque<Waiter*> waiting_;
  std::deque<Waiter*> holding_;  // with a slot (few: at most the limit)
  bool admitScheduled_ = false;
};

}  // namespace evrdma::detail
