/// \file
/// ReactorThread: a Reactor of its own that runs its loop on a thread of its own: one loop per
/// core (ListenerOptions::workers hands accepted connections to such Reactors). What is on it is
/// used from that thread only; other threads reach it with reactor().post() or runAndWait().
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "evrdma/Reactor.h"

namespace evrdma {

class ReactorThread {
 public:
  /// Makes the Reactor and starts its loop on a new thread. Check valid().
  ReactorThread();
  /// Stops the loop, joins the thread, then destroys the Reactor (silently closing what is still
  /// on it, as ~Reactor does). Not from the thread itself.
  ~ReactorThread();
  ReactorThread(const ReactorThread&) = delete;
  ReactorThread& operator=(const ReactorThread&) = delete;

  bool valid() const noexcept { return reactor_->valid() && thread_.joinable(); }
  Reactor& reactor() noexcept { return *reactor_; }
  /// Runs `fn` on the Reactor's thread and returns once it has run. Not from the thread itself.
  void runAndWait(const std::function<void()>& fn);

 private:
  std::unique_ptr<Reactor> reactor_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace evrdma
