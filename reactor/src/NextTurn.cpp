// NextTurn: a zero-timeout libevent timer, so the callback runs after the backend was polled again.
#include "NextTurn.h"

#include <event2/event.h>

#include <cerrno>

namespace evrdma::detail {

NextTurn::~NextTurn() {
  if (event_ != nullptr) event_free(event_);
}

int NextTurn::init(event_base* base, Callback callback, void* arg) noexcept {
  if (event_ != nullptr) event_free(event_);
  event_ = evtimer_new(base, callback, arg);
  return event_ != nullptr ? 0 : -ENOMEM;
}

void NextTurn::schedule() noexcept {
  if (event_ == nullptr || scheduled()) return;
  static const timeval kNow{0, 0};
  evtimer_add(event_, &kNow);
}

void NextTurn::cancel() noexcept {
  if (event_ != nullptr) evtimer_del(event_);
}

bool NextTurn::scheduled() const noexcept {
  return event_ != nullptr && evtimer_pending(event_, nullptr) != 0;
}

}  // namespace evrdma::detail
