/// \file
/// CompletionStats: what the completion channel of one device on one Reactor counted (shared by
/// every connection on that device; see Connection::completionStats()).
#pragma once

#include <array>
#include <cstdint>

namespace evrdma {

/// Counted like the OFA notes' statistics.
struct CompletionStats {
  static constexpr int kBatch = 16;  ///< completions asked for per ibv_poll_cq
  uint64_t events = 0;               ///< completion events taken from the channel
  uint64_t polls = 0;                ///< ibv_poll_cq calls
  uint64_t emptyFirstPolls = 0;      ///< first poll after an event found nothing (the arm race)
  uint64_t completions = 0;
  uint64_t strayCompletions = 0;     ///< for a QP no longer attached (dropped)
  uint64_t pollsForOneConnection = 0;  ///< polls whose completions were all one connection's (one lookup)
  uint64_t budgetYields = 0;         ///< turns that stopped at the budget
  uint64_t notifyFailures = 0;       ///< ibv_req_notify_cq failed (reported to the CQ's connections)
  uint64_t pollFailures = 0;         ///< ibv_poll_cq returned an error (reported likewise)
  uint64_t asyncEvents = 0;          ///< device async events read (errors and informational)
  /// Adaptive polling (Reactor::setPollingWindow).
  uint64_t pollingWindows = 0;       ///< times polling started after a completion
  uint64_t spinTurns = 0;            ///< loop turns that polled the CQs instead of sleeping
  uint64_t sleeps = 0;               ///< windows that ended with nothing: the CQs armed, the loop asleep
  uint64_t pollingStretches = 0;     ///< wake-ups after which the window was stretched (Reactor::setPollingStretch)
  uint64_t sharedCqsCreated = 0;     ///< CQs made for connections to share (16 of default depths each)
  uint64_t sharedCqsReleased = 0;    ///< of them destroyed once empty: one empty CQ is kept as a spare
  std::array<uint64_t, kBatch + 1> perPoll{};  ///< histogram: polls that returned n completions
};

}  // namespace evrdma
