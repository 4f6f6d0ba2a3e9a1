// PollingSettings: what the application asked of completion handling on one Reactor (its polling
// window and stretch, its turn budget). The ReactorCore owns it and writes it; each device's
// completion dispatcher and its adaptive polling are handed it when they are made and read it
// there, so nothing below the Reactor reaches back up to the Reactor for it.
#pragma once

#include <chrono>

namespace evrdma::detail {

struct PollingSettings {
  std::chrono::microseconds window{0};      // Reactor::setPollingWindow (0: event-driven)
  std::chrono::microseconds stretch{0};     // Reactor::setPollingStretch
  std::chrono::microseconds turnBudget{0};  // Reactor::setTurnBudget (0: TurnBudget::kMost completions)
};

}  // namespace evrdma::detail
