// EventHolder: the libevent event behind a Timer, SignalWatch or FdWatch, and its callback.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "ReactorCore.h"
#include "ReactorMember.h"
#include "evrdma/Reactor.h"

struct event;
struct timeval;

namespace evrdma {

// In evrdma, not detail: Watch.h names it (opaque there).
// The event and its callback. The callback is shared so that the trampoline keeps it alive while
// it runs, even if the watch that owns it is destroyed by the callback itself. If the Reactor is
// destroyed first, the event goes with it and the holder stays empty.
class EventHolder final : public detail::ReactorMember {
 public:
  explicit EventHolder(Reactor& reactor) : reactor_(&reactor) { coreOf(reactor).join(this); }
  EventHolder(const EventHolder&) = delete;
  EventHolder& operator=(const EventHolder&) = delete;
  ~EventHolder();
  // Makes the event; returns 0, -ENOMEM, or -ESHUTDOWN once the Reactor is gone.
  int make(int fd, short what, std::function<void(short)> callback);
  // Makes the event again for `what`, with the callback it has (a timer changing its kind).
  int remake(int fd, short what);
  // True when the event made last is still there for `what` (a timer restarted with the same kind
  // re-adds it instead of making a new one: no allocation per restart).
  bool holds(short what) const noexcept;
  int add(const timeval* timeout) noexcept;
  // A timeout counted from this call, not from the start of the loop's turn (as event_add's is).
  int addFromNow(const timeval& timeout) noexcept;
  // A periodic timer's period, counted from this call: on the Reactor's common timeout of that
  // length where it has one (ReactorCore::commonPeriod), else as addFromNow.
  int addPeriodFromNow(std::chrono::microseconds period) noexcept;
  void remove() noexcept;
  bool pending() const noexcept;
  void reset() noexcept;
  void onReactorGone() noexcept override;

 private:
  static void trampoline(int fd, short what, void* arg) noexcept;
  Reactor* reactor_;
  event* event_ = nullptr;
  short what_ = 0;
  std::shared_ptr<std::function<void(short)>> callback_;
};

}  // namespace evrdma
