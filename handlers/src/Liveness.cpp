// Liveness: the tick period, and each tick's verdict from the counters.
#include "Liveness.h"

#include <algorithm>

namespace evrdma::detail {

using std::chrono::milliseconds;

milliseconds Liveness::keepaliveTimeout() const noexcept {
  return settings_.keepaliveTimeout.count() > 0 ? settings_.keepaliveTimeout : 3 * settings_.keepaliveInterval;
}

milliseconds Liveness::tickPeriod() const noexcept {
  const bool keepalive = settings_.keepalive && settings_.keepaliveInterval.count() > 0;
  if (!keepalive && settings_.idleTimeout.count() == 0) return milliseconds(0);
  milliseconds tick = milliseconds::max();
  if (keepalive) tick = std::min({tick, settings_.keepaliveInterval, keepaliveTimeout() / 4});
  if (settings_.idleTimeout.count() > 0) tick = std::min(tick, settings_.idleTimeout / 4);
  return std::max(tick, milliseconds(1));
}

milliseconds Liveness::alignment() const noexcept {
  return std::clamp(tickPeriod() / 8, milliseconds(1), milliseconds(1000));
}

void Liveness::start(Clock::time_point at, uint64_t receives, uint64_t activity) noexcept {
  lastHeard_ = lastActive_ = at;
  heardMark_ = receives;
  activityMark_ = activity;
  probeOutstanding_ = false;
}

Liveness::Verdict Liveness::tick(Clock::time_point now, uint64_t receives, uint64_t activity,
                                 milliseconds& silence) noexcept {
  if (receives != heardMark_) {
    heardMark_ = receives;
    lastHeard_ = now;
    probeOutstanding_ = false;
  }
  if (activity != activityMark_) {
    activityMark_ = activity;
    lastActive_ = now;
  }
  if (settings_.idleTimeout.count() > 0 && now - lastActive_ >= settings_.idleTimeout) return Verdict::Idle;
  if (!settings_.keepalive || settings_.keepaliveInterval.count() == 0) return Verdict::Fine;
  silence = std::chrono::duration_cast<milliseconds>(now - lastHeard_);
  if (now - lastHeard_ >= keepaliveTimeout()) return Verdict::PeerSilent;
  if (now - lastHeard_ >= settings_.keepaliveInterval && !probeOutstanding_) {
    probeOutstanding_ = true;
    return Verdict::Probe;
  }
  return Verdict::Fine;
}

}  // namespace evrdma::detail
