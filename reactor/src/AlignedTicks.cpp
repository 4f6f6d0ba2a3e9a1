// AlignedTicks: an ordered queue of ticks by due instant, and one timer for the earliest.
#include "AlignedTicks.h"

#include <event2/event.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>
#include <random>

#include "Durations.h"

namespace evrdma::detail {

namespace {
// libevent's clock may be coarser than the steady clock and run ahead of it: a timer that fires
// early by less than this is on time (else it would fire again at once to find the tick due).
constexpr std::chrono::milliseconds kSlack{1};
}  // namespace

int AlignedTick::start(AlignedTicks& ticks, Clock::duration period, Clock::duration step, Clock::time_point now) noexcept {
  cancel();
  if (ticks.timer_ == nullptr) return -ENOMEM;
  if (step <= Clock::duration::zero()) step = std::chrono::milliseconds(1);
  period_ = std::max(period / step * step, step);
  // The aligned instant at or before now + period, never now or earlier.
  const Clock::duration offset = ticks.phase_ % step;
  const Clock::duration target = (now + period_).time_since_epoch() - offset;
  Clock::time_point first(target / step * step + offset);
  if (first <= now) first += step;
  try {
    ticks.insert(*this, first, now);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  return 0;
}

void AlignedTick::cancel() noexcept {
  if (owner_ != nullptr) owner_->remove(*this);
}

namespace {
AlignedTick::Clock::duration randomPhase() noexcept {
  try {
    std::random_device random;
    return std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, 999999)(random));
  } catch (...) {  // no source of randomness: the clock's nanoseconds will do
    return AlignedTick::Clock::now().time_since_epoch() % std::chrono::seconds(1);
  }
}
}  // namespace

AlignedTicks::AlignedTicks(size_t perTurn) : perTurn_(perTurn), phase_(randomPhase()) {}

AlignedTicks::~AlignedTicks() {
  *alive_ = false;
  discard();
  if (timer_ != nullptr) event_free(timer_);
}

int AlignedTicks::init(event_base* base) noexcept {
  if (timer_ != nullptr) event_free(timer_);
  timer_ = evtimer_new(base, &AlignedTicks::onTimer, this);
  return timer_ != nullptr ? 0 : -ENOMEM;
}

void AlignedTicks::discard() noexcept {
  for (auto& [due, tick] : due_) tick->owner_ = nullptr;
  due_.clear();
  if (timer_ != nullptr) evtimer_del(timer_);
  armed_ = false;
}

void AlignedTicks::insert(AlignedTick& tick, Clock::time_point due, Clock::time_point now) {
  tick.where_ = due_.emplace(due, &tick);  // after the others due then: in the order started
  tick.owner_ = this;
  arm(now);
}

void AlignedTicks::remove(AlignedTick& tick) noexcept {
  due_.erase(tick.where_);
  tick.owner_ = nullptr;
  if (due_.empty() && timer_ != nullptr) {
    evtimer_del(timer_);  // nothing left to wake for: the loop may end
    armed_ = false;
  }
}

void AlignedTicks::arm(Clock::time_point now) noexcept {
  if (due_.empty()) return;
  const Clock::time_point earliest = due_.begin()->first;
  // Set for an earlier instant: it fires, finds nothing due, and sets itself again (cheaper than
  // an event_add for every tick that goes).
  if (armed_ && armedFor_ <= earliest) return;
  const auto delay = std::chrono::ceil<std::chrono::microseconds>(earliest - now);
  const timeval tv = timevalOf(delay);
  if (evtimer_add(timer_, &tv) != 0) return;  // (only an allocation failure in the backend)
  armed_ = true;
  armedFor_ = earliest;
}

void AlignedTicks::onTimer(int, short, void* self) noexcept { static_cast<AlignedTicks*>(self)->runDue(); }

void AlignedTicks::runDue() noexcept {
  armed_ = false;
  ++wakeups_;
  const Clock::time_point now = Clock::now();  // once for every tick of this turn
  const std::shared_ptr<bool> alive = alive_;
  for (size_t ran = 0; ran < perTurn_ && !due_.empty(); ++ran) {
    auto first = due_.begin();
    if (first->first > now + kSlack) break;
    AlignedTick* tick = first->second;
    // Its next instant, past now: a turn late by more than a period skips the instants it missed.
    Clock::time_point next = first->first + tick->period_;
    if (next <= now) next += ((now - next) / tick->period_ + 1) * tick->period_;
    auto node = due_.extract(first);  // re-queued without an allocation
    node.key() = next;
    tick->where_ = due_.insert(std::move(node));
    ++ticksRun_;
    tick->onTick_(now);
    if (!*alive) return;
  }
  arm(now);
}

}  // namespace evrdma::detail
