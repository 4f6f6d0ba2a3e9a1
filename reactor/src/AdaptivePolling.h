// AdaptivePolling: Reactor::setPollingWindow for one device's completion dispatcher. After a pass
// that found completions, the CQs are polled again on every loop turn (through libevent's backend
// with a zero timeout, so the loop's sockets, timers and signals are served in between) until a
// window passes with nothing; then they are armed and looked at once more (the notify race), and
// the loop sleeps until the channel wakes it.
#pragma once

#include <chrono>
#include <cstdint>

#include "NextTurn.h"
#include "PollingSettings.h"
#include "evrdma/CompletionStats.h"

struct event_base;

namespace evrdma::detail {

class AdaptivePolling {
 public:
  // What is polled: the dispatcher's CQs.
  class Source {
   public:
    // Polls every CQ once (up to the turn's budget); how many completions were handled.
    virtual int pollEveryCq() noexcept = 0;
    // Arms every CQ that took an event since it was last armed.
    virtual void armEveryCq() noexcept = 0;
    // False while a pass delivers (a callback runs a nested loop) or once the device is going.
    virtual bool mayPoll() const noexcept = 0;

   protected:
    ~Source() = default;
  };

  // How many polls one loop turn makes before it goes back through libevent, and every how many
  // turns without a completion the clock is read (see spin()).
  static constexpr int kPollBurst = 32;
  // A turn's polls go on past completions until it has handed out this many (a poll's worth):
  // a ping-pong then finds its next message, or its send's completion, without a pass through
  // libevent (a system call) for each.
  static constexpr int kTurnCompletions = CompletionStats::kBatch;
  static constexpr uint32_t kTurnsPerClockRead = 8;

  // `settings`: the Reactor's window and stretch, read as they are when a polling begins and ends.
  AdaptivePolling(const PollingSettings& settings, CompletionStats& stats, Source& source)
      : settings_(settings), stats_(stats), source_(source) {}
  int init(event_base* base) noexcept { return turn_.init(base, &AdaptivePolling::onTurn, this); }

  // A pass found completions: poll on the next turns, the window timed afresh.
  void start() noexcept;
  // No polling turn any more (the device is going, or the dispatcher releases its CQs).
  void stop() noexcept;

 private:
  static void onTurn(int, short, void* self) noexcept;
  void spin() noexcept;

  const PollingSettings& settings_;
  CompletionStats& stats_;
  Source& source_;
  NextTurn turn_;
  bool polling_ = false;
  // The window of this polling: the Reactor's, or longer when stretched (Reactor::setPollingStretch).
  std::chrono::microseconds window() const noexcept;

  uint32_t emptyTurns_ = 0;  // polling turns since the last completion
  std::chrono::steady_clock::time_point quietSince_{};  // read at the kTurnsPerClockRead-th of them
  std::chrono::microseconds stretched_{0};  // the gap last slept through x 1.5, within the stretch
};

}  // namespace evrdma::detail
