// TurnQueue: closures run at most a few per loop turn, in the order queued, the rest on later
// turns (after libevent has polled its backend and run its timers). What would cost one long turn
// if run together, such as the teardowns of many connections closed at once, is spread so that
// the loop serves everything else in between.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>

#include "NextTurn.h"

namespace evrdma::detail {

class TurnQueue {
 public:
  explicit TurnQueue(size_t perTurn) : perTurn_(perTurn) {}
  ~TurnQueue() { *alive_ = false; }
  TurnQueue(const TurnQueue&) = delete;
  TurnQueue& operator=(const TurnQueue&) = delete;
  // Returns 0 or -ENOMEM.
  int init(event_base* base) noexcept { return turn_.init(base, &TurnQueue::onTurn, this); }
  // Runs `fn` on the next turn if fewer than perTurn are queued before it, else on a later one.
  void push(std::function<void()> fn);
  // Destroys what is queued without running it.
  void discard() noexcept;

 private:
  static void onTurn(int, short, void* self) noexcept;
  void runTurn() noexcept;

  const size_t perTurn_;
  std::deque<std::function<void()>> queued_;
  NextTurn turn_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // a closure may destroy the owner
};

}  // namespace evrdma::detail
