// Timer, SignalWatch and FdWatch: each one libevent event, added, fired and removed on the
// Reactor's base.
#include "evrdma/Watch.h"

#include <event2/event.h>

#include <cerrno>
#include <csignal>
#include <utility>

#include "Durations.h"
#include "EventHolder.h"
#include "ReactorCore.h"
#include "evrdma/Reactor.h"

namespace evrdma {

EventHolder::~EventHolder() {
  reset();
  if (reactor_ != nullptr) coreOf(*reactor_).leave(this);
}

void EventHolder::onReactorGone() noexcept {
  reset();
  reactor_ = nullptr;
}

int EventHolder::make(int fd, short what, std::function<void(short)> callback) {
  reset();
  if (reactor_ == nullptr || coreOf(*reactor_).dying()) return -ESHUTDOWN;
  callback_ = std::make_shared<std::function<void(short)>>(std::move(callback));
  return remake(fd, what);
}

int EventHolder::remake(int fd, short what) {
  if (event_ != nullptr) event_free(event_);
  event_ = nullptr;
  if (reactor_ == nullptr || coreOf(*reactor_).dying()) return -ESHUTDOWN;
  if (callback_ == nullptr) return -EINVAL;
  event_ = event_new(reactor_->base(), fd, what, &EventHolder::trampoline, this);
  what_ = what;
  return event_ != nullptr ? 0 : -ENOMEM;
}

bool EventHolder::holds(short what) const noexcept {
  return event_ != nullptr && what_ == what && reactor_ != nullptr && !coreOf(*reactor_).dying();
}

void EventHolder::trampoline(int, short what, void* arg) noexcept {
  auto keepAlive = static_cast<EventHolder*>(arg)->callback_;
  (*keepAlive)(what);
}

int EventHolder::add(const timeval* timeout) noexcept {
  if (event_ == nullptr) return -EINVAL;
  return event_add(event_, timeout) == 0 ? 0 : -EINVAL;
}

int EventHolder::addFromNow(const timeval& timeout) noexcept {
  // libevent counts a timeout from the time it read when the turn began: after a long callback,
  // a delay would be cut by the callback's length. A delay of 0 is due either way.
  if (event_ != nullptr && (timeout.tv_sec != 0 || timeout.tv_usec != 0)) event_base_update_cache_time(reactor_->base());
  return add(&timeout);
}

int EventHolder::addPeriodFromNow(std::chrono::microseconds period) noexcept {
  const timeval* common = event_ != nullptr && period.count() > 0 ? coreOf(*reactor_).commonPeriod(period) : nullptr;
  if (common == nullptr) {
    return addFromNow(detail::timevalOf(period));
  }
  event_base_update_cache_time(reactor_->base());  // (see addFromNow)
  return add(common);
}

void EventHolder::remove() noexcept {
  if (event_ != nullptr) event_del(event_);
}

bool EventHolder::pending() const noexcept {
  return event_ != nullptr && event_pending(event_, EV_TIMEOUT | EV_READ | EV_WRITE | EV_SIGNAL, nullptr) != 0;
}

void EventHolder::reset() noexcept {
  if (event_ != nullptr) event_free(event_);
  event_ = nullptr;
  callback_.reset();
}

Timer::Timer(Reactor& reactor, std::function<void()> callback)
    : reactor_(&reactor), reactorAlive_(coreOf(reactor).aliveToken()), callback_(std::move(callback)) {}
Timer::~Timer() = default;

int Timer::start(std::chrono::milliseconds delay, bool periodic) noexcept {
  // One-shot and periodic differ in EV_PERSIST, fixed at creation: a new event only when the kind
  // changes. Re-adding a pending event moves its deadline (and drops a fire not yet run), so a
  // timer restarted per message costs no allocation.
  const short what = periodic ? EV_PERSIST : 0;
  if (event_ == nullptr || !event_->holds(what)) {
    if (reactorAlive_.expired() || coreOf(*reactor_).dying()) return -ESHUTDOWN;
    if (event_ == nullptr) {
      // The callback moves into the event's, which the trampoline keeps alive while it runs (the
      // callback may destroy its timer).
      event_ = std::make_unique<EventHolder>(*reactor_);
      if (int rc = event_->make(-1, what, [cb = std::move(callback_)](short) { cb(); }); rc != 0) return rc;
    } else if (int rc = event_->remake(-1, what); rc != 0) {
      return rc;
    }
  }
  if (periodic) return event_->addPeriodFromNow(delay);  // (many timers share a period: keepalive's)
  return event_->addFromNow(detail::timevalOf(delay));
}

int Timer::startOnce(std::chrono::milliseconds delay) noexcept { return start(delay, false); }
int Timer::startPeriodic(std::chrono::milliseconds period) noexcept { return start(period, true); }
void Timer::cancel() noexcept {
  if (event_ != nullptr) event_->remove();
}
bool Timer::active() const noexcept { return event_ != nullptr && event_->pending(); }

SignalWatch::SignalWatch(Reactor& reactor, int signo, std::function<void(int)> callback) : event_(std::make_unique<EventHolder>(reactor)) {
  error_ = event_->make(signo, EV_SIGNAL | EV_PERSIST, [cb = std::move(callback), signo](short) { cb(signo); });
  if (error_ == 0) error_ = event_->add(nullptr);
}

FdWatch::FdWatch(Reactor& reactor, int fd, short events, std::function<void(short)> callback) : event_(std::make_unique<EventHolder>(reactor)) {
  error_ = event_->make(fd, static_cast<short>((events & (EV_READ | EV_WRITE)) | EV_PERSIST), std::move(callback));
  if (error_ == 0) error_ = event_->add(nullptr);
}

}  // namespace evrdma

namespace evrdma {
SignalWatch::~SignalWatch() = default;
FdWatch::~FdWatch() = default;
void FdWatch::pause() noexcept { event_->remove(); }
int FdWatch::resume() noexcept { return event_->add(nullptr); }
}  // namespace evrdma
