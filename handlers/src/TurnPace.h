// TurnPace: at most ListenerOptions::acceptsPerTurn connect requests are answered (or, on a
// worker, handed-over ones set up) per loop turn: the turn's count, and the zero-delay timer that
// starts the next turn's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "evrdma/Watch.h"

namespace evrdma::detail {

class TurnPace {
 public:
  // `perTurn` 0: no limit. `onNextTurn` runs at the start of a turn the pace was armed for.
  TurnPace(Reactor& reactor, uint32_t perTurn, std::function<void()> onNextTurn)
      : reactor_(reactor), perTurn_(perTurn), onNextTurn_(std::move(onNextTurn)) {}

  // Another may be answered in this turn.
  bool mayAnswer() const noexcept { return perTurn_ == 0 || answered_ < perTurn_; }
  // Counts one answered in this turn (the count starts over on the next); returns the count.
  uint32_t countAnswer() noexcept;
  void armNextTurn() noexcept;
  // The Reactor is gone: no next turn.
  void stop() noexcept { timer_.reset(); }

 private:
  Reactor& reactor_;
  const uint32_t perTurn_;
  std::function<void()> onNextTurn_;
  uint32_t answered_ = 0;
  std::unique_ptr<Timer> timer_;
};

}  // namespace evrdma::detail
