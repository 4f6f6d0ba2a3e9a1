// Liveness: the keepalive and idle-timeout verdicts of one connection (ConnectionOptions::
// keepaliveInterval, keepaliveTimeout, idleTimeout), from counters its data path only increments
// and compared at each tick of a timer: whether to probe a silent peer, or to end a connection
// whose peer has gone silent or on which nothing has moved. No clock of its own: the connection
// passes the time, so it is unit-tested without a device or a loop.
#pragma once

#include <chrono>
#include <cstdint>

namespace evrdma::detail {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    bool keepalive = false;  // framed, with a keepaliveInterval
    std::chrono::milliseconds keepaliveInterval{0};
    std::chrono::milliseconds keepaliveTimeout{0};  // 0: 3 x keepaliveInterval
    std::chrono::milliseconds idleTimeout{0};       // 0: never
  };
  enum class Verdict {
    Fine,
    Probe,        // the peer has been silent for keepaliveInterval: send it a probe (once per silence)
    Idle,         // nothing moved either way for idleTimeout
    PeerSilent,   // not even an answer to a probe for keepaliveTimeout
  };

  explicit Liveness(const Settings& settings) : settings_(settings) {}

  // How often tick() must run to notice each deadline within a quarter of it; 0: no checks at all.
  std::chrono::milliseconds tickPeriod() const noexcept;
  // The ticks fall on multiples of this on the steady clock (an eighth of the tick period, 1 ms to
  // 1 s: see AlignedTicks), so that a connection's tick is at most that late, and the ticks of
  // many connections with one period come together.
  std::chrono::milliseconds alignment() const noexcept;
  std::chrono::milliseconds keepaliveTimeout() const noexcept;
  std::chrono::milliseconds idleTimeout() const noexcept { return settings_.idleTimeout; }
  // The connection was established at `at`, with `receives` receives and `activity` messages and
  // operations so far.
  void start(Clock::time_point at, uint64_t receives, uint64_t activity) noexcept;
  // `receives`: every successful receive, the protocol's own frames included (the peer is alive);
  // `activity`: messages either way and operations completed (the application uses it). With
  // PeerSilent, `silence` says for how long.
  Verdict tick(Clock::time_point now, uint64_t receives, uint64_t activity, std::chrono::milliseconds& silence) noexcept;

 private:
  Settings settings_;
  uint64_t heardMark_ = 0, activityMark_ = 0;
  Clock::time_point lastHeard_{}, lastActive_{};
  bool probeOutstanding_ = false;
};

}  // namespace evrdma::detail
