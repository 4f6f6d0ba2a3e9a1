// LoopHold: holds a ReactorThread's loop (its thread waits) from hold() until it is destroyed:
// how a test stops a peer (nothing of its evrdma returns credits or reads) and lets it run again.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "evrdma/ReactorThread.h"

namespace evrdma::test {

class LoopHold {
 public:
  explicit LoopHold(evrdma::ReactorThread& thread) : thread_(thread), state_(std::make_shared<State>()) {}
  ~LoopHold() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->held = false;
    state_->changed.notify_all();
  }
  bool hold() {
    // The held thread shares the state: it may wake and look at it after this is gone (on the
    // test's stack, it was read out of scope under ASan).
    std::shared_ptr<State> state = state_;
    if (thread_.reactor().post([state] {
          std::unique_lock<std::mutex> lock(state->mutex);
          state->holding = true;
          state->changed.notify_all();
          state->changed.wait(lock, [&state] { return !state->held; });
        }) != 0)
      return false;
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait(lock, [&state] { return state->holding; });
    return true;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool held = true, holding = false;
  };
  evrdma::ReactorThread& thread_;
  std::shared_ptr<State> state_;
};

}  // namespace evrdma::test
