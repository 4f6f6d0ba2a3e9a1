// Reactor: the event loop evrdma runs on: a libevent event_base, borrowed from the application or
// owned. Everything evrdma watches (CM events, completions, timers, signals, sockets) is an event on
// that one base, serviced by one thread: the one that runs the loop.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

struct event;
struct event_base;
struct ibv_context;

namespace evrdma {

class CmDispatcher;
class CompletionDispatcher;

class Reactor {
 public:
  // Owns a new event_base, freed with the Reactor. Check valid(): libevent can fail to make one.
  Reactor();
  // Borrows the application's event_base: evrdma adds its events there and never frees it.
  // The base must outlive the Reactor and everything created on it.
  explicit Reactor(event_base* borrowed);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  bool valid() const noexcept { return base_ != nullptr && deferEvent_ != nullptr; }
  event_base* base() const noexcept { return base_; }
  bool ownsBase() const noexcept { return ownsBase_; }

  // Runs the loop until stop() (it does not return just because nothing is pending).
  // Returns 0, or -1 if libevent failed.
  int run() noexcept;
  // Makes run() (or the application's own event_base_dispatch) return after the current callback.
  void stop() noexcept;

  // Runs `fn` on the loop after the current callback has returned (or at the next loop turn when
  // called from outside a callback), in the order deferred. Safe from any callback. Never call it
  // from another thread.
  void defer(std::function<void()> fn);

  // The CM event channel of this reactor, made on first use. Null, with `error` = -errno, when the
  // machine has no RDMA CM (e.g. no rdma_ucm module).
  CmDispatcher* cm(int& error);
  // The completion channel of this reactor for one device, made on first use; null + -errno.
  CompletionDispatcher* completions(ibv_context* device, int& error);

 private:
  static void onDeferEvent(int, short, void* self) noexcept;
  void runDeferred() noexcept;

  event_base* base_ = nullptr;
  bool ownsBase_ = false;
  event* deferEvent_ = nullptr;
  std::vector<std::function<void()>> deferred_;
  // Destroyed in this order by ~Reactor: deferred work first (it may destroy connections, whose
  // CQs and ids must go before their channels), then completion channels, then the CM channel.
  std::map<ibv_context*, std::unique_ptr<CompletionDispatcher>> completions_;
  std::unique_ptr<CmDispatcher> cm_;
};

}  // namespace evrdma
