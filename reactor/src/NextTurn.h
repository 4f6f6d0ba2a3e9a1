// NextTurn: runs a callback on a later turn of the loop: after libevent has polled its backend
// (sockets, signals) and expired its timers. This is how a source that spent its budget yields.
//
// event_active() is no yield: libevent 2.1 runs an event activated from inside a callback again in
// the same pass over the active queue, so a source that re-activates itself while work keeps
// arriving never lets the loop reach epoll or the timer heap. A zero timeout goes through the
// timer heap, which libevent reads only after its next backend poll.
#pragma once

struct event;
struct event_base;

namespace evrdma::detail {

class NextTurn {
 public:
  using Callback = void (*)(int, short, void*);
  NextTurn() = default;
  ~NextTurn();
  NextTurn(const NextTurn&) = delete;
  NextTurn& operator=(const NextTurn&) = delete;

  // Returns 0 or -ENOMEM.
  int init(event_base* base, Callback callback, void* arg) noexcept;
  // Calls the callback on the next turn; once, however often this is called before then.
  void schedule() noexcept;
  void cancel() noexcept;
  bool scheduled() const noexcept;

 private:
  event* event_ = nullptr;
};

}  // namespace evrdma::detail
