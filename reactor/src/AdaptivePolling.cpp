// AdaptivePolling: the polling turns after a completion, the window's clock, and the arm at its end.
#include "AdaptivePolling.h"

namespace evrdma::detail {

void AdaptivePolling::onTurn(int, short, void* self) noexcept { static_cast<AdaptivePolling*>(self)->spin(); }

std::chrono::microseconds AdaptivePolling::window() const noexcept {
  const std::chrono::microseconds window = settings_.window;
  return window.count() > 0 && stretched_ > window ? stretched_ : window;
}

void AdaptivePolling::start() noexcept {
  emptyTurns_ = 0;
  const std::chrono::microseconds most = settings_.stretch;
  if (!polling_ && most > settings_.window && quietSince_ != std::chrono::steady_clock::time_point{}) {
    // Woken by an event after a window passed (not the first wake-up: no window has passed yet):
    // the gap since the last completion says how long the next windows should be, if a window
    // that long is worth a core (the stretch).
    const auto gap = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - quietSince_);
    stretched_ = gap <= most ? std::min(most, gap * 3 / 2) : std::chrono::microseconds(0);
    if (stretched_.count() > 0) ++stats_.pollingStretches;
  }
  if (!polling_) {
    polling_ = true;
    ++stats_.pollingWindows;
  }
  turn_.schedule();
}

void AdaptivePolling::stop() noexcept {
  turn_.cancel();
  polling_ = false;
}

void AdaptivePolling::spin() noexcept {
  if (!polling_ || !source_.mayPoll()) return;
  ++stats_.spinTurns;
  // Each turn through libevent costs a backend call (a system call): poll a few times here first,
  // so a completion that is about to land is found without one, yet the backend's sockets, timers
  // and signals wait only that long. Polls go on past completions until a poll's worth was handed
  // out: a ping-pong's answer and its send's completion then cost no turn each (one turn per round
  // trip on a pingpong server before, a fifth of one since), and a flood still yields at once.
  int handled = 0;
  for (int i = 0; i < kPollBurst && handled < kTurnCompletions && polling_ && source_.mayPoll(); ++i)
    handled += source_.pollEveryCq();
  if (handled > 0) {
    emptyTurns_ = 0;
    turn_.schedule();  // after the backend's zero-timeout poll and the timers
    return;
  }
  // The window is timed from the kTurnsPerClockRead-th empty turn, reading the clock only every
  // that many empty turns and never while completions keep coming: where the clocksource is not
  // the TSC (an emulated HPET in a VM), a clock read is a system call, as dear as a turn. So the
  // window runs that many turns longer than asked, and a completion costs no clock read.
  const std::chrono::microseconds window = this->window();
  if (window.count() > 0 && ++emptyTurns_ % kTurnsPerClockRead != 0) {
    turn_.schedule();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (emptyTurns_ == kTurnsPerClockRead) quietSince_ = now;
  if (window.count() > 0 && now - quietSince_ < window) {
    turn_.schedule();
    return;
  }
  // A window with nothing: arm, then look once more, since a completion that landed before the
  // arm raises no event.
  source_.armEveryCq();
  if (source_.pollEveryCq() > 0) {
    emptyTurns_ = 0;
    turn_.schedule();
    return;
  }
  polling_ = false;
  stretched_ = std::chrono::microseconds(0);  // stretched or not, this gap was longer: learnt again on waking
  ++stats_.sleeps;
}

}  // namespace evrdma::detail
