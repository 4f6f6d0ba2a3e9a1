/// \file
/// Timers, signal watches and fd watches on a Reactor. Each owns one libevent event (RAII: destroying
/// the watch removes it). Callbacks run on the loop; a watch may be stopped or even destroyed from
/// inside its own callback. Callbacks must not throw: the trampolines are noexcept, so an escaping
/// exception terminates instead of unwinding through libevent's C frames.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "evrdma/Reactor.h"

struct event;

namespace evrdma {

class EventHolder;  ///< one libevent event and its callback (not installed)

class Timer {
 public:
  Timer(Reactor& reactor, std::function<void()> callback);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  /// Fires once after `delay`, counted from this call (a bare event_add counts from the start of
  /// the loop's turn). Restarting a running timer moves its deadline. Returns 0 or -errno.
  int startOnce(std::chrono::milliseconds delay) noexcept;
  /// Fires every `period` until cancelled. Returns 0 or -errno.
  int startPeriodic(std::chrono::milliseconds period) noexcept;
  void cancel() noexcept;
  bool active() const noexcept;

 private:
  int start(std::chrono::milliseconds delay, bool periodic) noexcept;
  Reactor* reactor_;
  std::weak_ptr<const void> reactorAlive_;  ///< expires with the Reactor (a timer may outlive it)
  std::function<void()> callback_;          ///< handed to the event at the first start
  /// Made at the first start: a timer never started allocates nothing (a connection has several
  /// that run only while it closes).
  std::unique_ptr<EventHolder> event_;
};

/// Calls `callback(signo)` on the loop each time `signo` arrives. libevent routes a signal to one
/// event_base at a time: the one that added a watch for it last.
/// Made: check valid(); error() is -errno.
class SignalWatch {
 public:
  SignalWatch(Reactor& reactor, int signo, std::function<void(int)> callback);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  bool valid() const noexcept { return error_ == 0; }
  int error() const noexcept { return error_; }

 private:
  std::unique_ptr<EventHolder> event_;
  int error_ = 0;
};

/// Calls `callback(events)` while `fd` is readable and/or writable (events: FdWatch::kRead|kWrite).
/// Does not own the fd.
class FdWatch {
 public:
  static constexpr short kRead = 0x02;   ///< EV_READ
  static constexpr short kWrite = 0x04;  ///< EV_WRITE
  FdWatch(Reactor& reactor, int fd, short events, std::function<void(short)> callback);
  ~FdWatch();
  FdWatch(const FdWatch&) = delete;
  FdWatch& operator=(const FdWatch&) = delete;
  bool valid() const noexcept { return error_ == 0; }
  int error() const noexcept { return error_; }
  void pause() noexcept;
  int resume() noexcept;

 private:
  std::unique_ptr<EventHolder> event_;
  int error_ = 0;
};

}  // namespace evrdma
