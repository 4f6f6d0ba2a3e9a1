// Mailbox: closures handed to a Reactor from other threads (Reactor::post). They wait in a list
// under a mutex; the first one into an empty list wakes the loop through an eventfd the loop
// watches, and the loop runs them all in its own thread, in the order posted. The only thing
// another thread touches is the list and the eventfd: libevent's own structures are never used
// across threads (a borrowed base need not have libevent's locking turned on).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

struct event;
struct event_base;

namespace evrdma::detail {

class Mailbox {
 public:
  Mailbox() = default;
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;
  ~Mailbox();

  // Watches a new eventfd on `base`. 0 or -errno.
  int init(event_base* base) noexcept;
  // Any thread.
  void post(std::function<void()> fn);
  // The closures not run yet are destroyed unrun (the Reactor is going).
  void discard() noexcept;

 private:
  static void onReadable(int fd, short, void* self) noexcept;
  void runPosted() noexcept;

  int fd_ = -1;
  event* event_ = nullptr;
  std::mutex mutex_;
  std::vector<std::function<void()>> posted_;
};

}  // namespace evrdma::detail
