// LoopHold: holds a ReactorThread's loop (its thread waits) from hold() until it is destroyed:
// how a test stops a peer (nothing of its evrdma returns credits or reads) and lets it run again.
#pragma once

#include <condition_variable>
#include <mutex>

#include "evrdma/ReactorThread.h"

namespace evrdma::test {

class LoopHold {
 public:
  explicit LoopHold(evrdma::ReactorThread& thread) : thread_(thread) {}
  ~LoopHold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = false;
    changed_.notify_all();
  }
  bool hold() {
    if (thread_.reactor().post([this] {
          std::unique_lock<std::mutex> lock(mutex_);
          holding_ = true;
          changed_.notify_all();
          changed_.wait(lock, [this] { return !held_; });
        }) != 0)
      return false;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return holding_; });
    return true;
  }

 private:
  evrdma::ReactorThread& thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = true, holding_ = false;
};

}  // namespace evrdma::test
