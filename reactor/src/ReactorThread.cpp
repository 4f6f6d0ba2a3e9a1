// ReactorThread: starting a Reactor's loop on a thread of its own, and stopping and joining it.
#include "evrdma/ReactorThread.h"

#include <condition_variable>
#include <mutex>

namespace evrdma {

ReactorThread::ReactorThread() : reactor_(std::make_unique<Reactor>()) {
  if (!reactor_->valid() || reactor_->acceptPosts() != 0) return;  // before its loop runs
  thread_ = std::thread([this] {
    // run() also returns when something on the loop calls stop(): only ours ends the thread.
    while (!stopping_) reactor_->run();
  });
}

ReactorThread::~ReactorThread() {
  if (thread_.joinable()) {
    (void)reactor_->post([this] {
      stopping_ = true;
      reactor_->stop();
    });
    thread_.join();
  }
  reactor_.reset();
}

void ReactorThread::runAndWait(const std::function<void()>& fn) {
  std::mutex mutex;
  std::condition_variable done;
  bool ran = false;
  (void)reactor_->post([&] {
    fn();
    std::lock_guard<std::mutex> lock(mutex);
    ran = true;
    done.notify_one();
  });
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return ran; });
}

}  // namespace evrdma
