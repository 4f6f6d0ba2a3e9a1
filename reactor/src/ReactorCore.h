// ReactorCore: what a Reactor holds behind its API (its base, deferred closures, posts, the CM
// channel, the devices, the members to close when it goes first), and what evrdma's own objects
// use of their Reactor through coreOf(reactor). Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "PollingSettings.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/ConnectionState.h"
#include "evrdma/Reactor.h"

struct event;
struct event_base;
struct timeval;
struct ibv_context;

namespace evrdma {

class CmDispatcher;
class Device;

namespace detail {
class AlignedTicks;
class ConnectGate;
class Mailbox;
class ReactorMember;
class NextTurn;
class TurnQueue;
}  // namespace detail

class ReactorCore {
 public:
  // `base` null: libevent could not make one (the Reactor is then not valid()).
  ReactorCore(Reactor& reactor, event_base* base, bool ownsBase);
  ~ReactorCore();
  ReactorCore(const ReactorCore&) = delete;
  ReactorCore& operator=(const ReactorCore&) = delete;

  Reactor& reactor() const noexcept { return reactor_; }
  bool valid() const noexcept { return base_ != nullptr && deferEvent_ != nullptr; }
  event_base* base() const noexcept { return base_; }
  bool ownsBase() const noexcept { return ownsBase_; }

  // ~Reactor's first step, while everything is still reachable: each member lets go, then the
  // devices and the CM channel go. Nothing of the application's is called.
  void shutDown() noexcept;
  // True while ~Reactor lingers (see Reactor::setLinger): nothing of the application's is called.
  bool lingering() const noexcept { return lingering_; }

  void defer(std::function<void()> fn);
  // Runs a connection's last step of teardown (destroying its QP and id, onClosed) on a later
  // turn, at most Reactor::kTeardownsPerTurn per turn: many connections closed at once would
  // otherwise cost one long turn (about 3 ms each on the test bed) while the others wait.
  void deferTeardown(std::function<void()> fn);
  // The connections' keepalive and idle ticks, together on aligned instants (see AlignedTicks.h),
  // at most kTicksPerTurn a turn.
  detail::AlignedTicks& alignedTicks() noexcept { return *ticks_; }
  static constexpr size_t kTicksPerTurn = 16;
  int acceptPosts() noexcept;
  bool acceptsPosts() const noexcept { return acceptsPosts_; }
  int post(std::function<void()> fn);

  // What completion handling was asked to do; handed down to each device's dispatcher.
  const detail::PollingSettings& pollingSettings() const noexcept { return polling_; }
  void setPollingWindow(std::chrono::microseconds window) noexcept { polling_.window = window; }
  std::chrono::microseconds pollingWindow() const noexcept { return polling_.window; }
  void setPollingStretch(std::chrono::microseconds most) noexcept { polling_.stretch = most; }
  std::chrono::microseconds pollingStretch() const noexcept { return polling_.stretch; }
  void setTurnBudget(std::chrono::microseconds budget) noexcept { polling_.turnBudget = budget; }
  std::chrono::microseconds turnBudget() const noexcept { return polling_.turnBudget; }
  void setLinger(std::chrono::milliseconds linger) noexcept { linger_ = linger; }
  std::chrono::milliseconds linger() const noexcept { return linger_; }

  // The CM event channel of this reactor, made on first use. Null, with `error` = -errno, when the
  // machine has no RDMA CM (e.g. no rdma_ucm module).
  CmDispatcher* cm(int& error);
  const CmDispatcher* cmIfMade() const noexcept { return cm_.get(); }
  // What this reactor holds of one device (its PD, buffers, SRQs, completion channel and CQs),
  // made on first use; null + -errno.
  Device* device(ibv_context* context, int& error);
  // Frees what this reactor held of a removed device once nothing uses it (see
  // Device::markRemoved); the next use of the device makes a new one.
  void releaseDevice(ibv_context* device) noexcept;
  // The CM reported that `device` is being removed (see Device::markRemoved).
  void deviceRemoved(ibv_context* device) noexcept;
  const std::map<ibv_context*, std::unique_ptr<Device>>& devices() const noexcept { return devices_; }

  // What to close when the Reactor goes first (see ReactorMember).
  void join(detail::ReactorMember* member) { members_.insert(member); }
  void leave(detail::ReactorMember* member) noexcept { members_.erase(member); }
  const std::unordered_set<detail::ReactorMember*>& members() const noexcept { return members_; }
  // The connections on this Reactor by state, kept by each as its state moves (Reactor::stats
  // walked every member: a long turn at 100 000).
  ConnectionCounts& connectionCounts() noexcept { return connectionCounts_; }
  // True while ~Reactor runs: nothing new may be started.
  bool dying() const noexcept { return dying_; }
  // Expires once the Reactor is gone: what may outlive it without being its member (a Timer not
  // started yet) asks this before it touches the Reactor.
  std::weak_ptr<const void> aliveToken() const noexcept { return alive_; }
  // The duration libevent keeps one queue for (event_base_init_common_timeout), for a periodic
  // timer of `period`: thousands of timers of one period (a keepalive's, per connection) are then
  // queued in order, each re-added in O(1), with one entry in the timer heap for all of them
  // instead of one each. Null past kMostCommonPeriods periods (a plain timeout then).
  const timeval* commonPeriod(std::chrono::microseconds period) noexcept;
  static constexpr size_t kMostCommonPeriods = 64;  // libevent allows 256 per base
  MemoryAccount& memoryAccount() noexcept { return *memory_; }
  detail::ConnectGate& connectGate() noexcept { return *connectGate_; }

 private:
  // Streams still sending get up to linger_ to finish, with only the CM and completion channels
  // served (a poll(2) of their fds, no event loop): see Reactor::setLinger.
  void lingerStreams() noexcept;
  bool anyMemberLingers() const noexcept;
  void makeDeferEvents() noexcept;
  static void onDeferEvent(int, short, void* self) noexcept;
  void runDeferred() noexcept;

  Reactor& reactor_;
  event_base* base_ = nullptr;
  bool ownsBase_ = false;
  // Before the members that charge it (destroyed after them).
  std::shared_ptr<MemoryAccount> memory_;  // shared with the application's MemoryCharges
  std::unique_ptr<detail::ConnectGate> connectGate_;
  bool dying_ = false;
  bool lingering_ = false;
  std::shared_ptr<const void> alive_ = std::make_shared<const char>(0);  // see aliveToken
  event* deferEvent_ = nullptr;
  // Closures deferred by deferred closures run on a later turn, after the backend poll and the
  // timers: a chain of them can never starve the loop.
  std::unique_ptr<detail::NextTurn> deferLater_;
  std::unique_ptr<detail::TurnQueue> teardowns_;  // deferTeardown
  std::unique_ptr<detail::AlignedTicks> ticks_;
  std::unique_ptr<detail::Mailbox> mailbox_;      // Reactor::post, from other threads
  std::atomic<bool> acceptsPosts_{false};         // read by posting threads
  bool runningDeferred_ = false;
  detail::PollingSettings polling_{std::chrono::microseconds(0), std::chrono::microseconds(0),
                                  Reactor::kDefaultTurnBudget};
  std::chrono::milliseconds linger_{Reactor::kDefaultLinger};
  std::vector<std::function<void()>> deferred_;
  std::vector<std::pair<std::chrono::microseconds, const timeval*>> commonPeriods_;
  std::unordered_set<detail::ReactorMember*> members_;
  ConnectionCounts connectionCounts_;
  // What each device's completion channel counted, kept for the Reactor's lifetime (also after a
  // removed device's channel is gone: Connection::completionStats() points here). One per channel
  // ever made; a deque never moves its elements.
  std::deque<CompletionStats> completionStats_;
  // Destroyed in this order by shutDown: the members first (their CQ reservations and ids must go
  // before the channels), then the devices (their completion channels), then the CM channel.
  std::map<ibv_context*, std::unique_ptr<Device>> devices_;
  std::unique_ptr<CmDispatcher> cm_;
};

// The core of `reactor`, for evrdma's own objects. Reactor.h offers no accessor and befriends
// nothing: its core_ is protected, and a class derived from Reactor (never made) names it here.
struct ReactorCoreAccess : Reactor {
  // A pointer to the protected member, named through this class: it applies to any Reactor.
  static ReactorCore& of(const Reactor& reactor) noexcept { return *(reactor.*&ReactorCoreAccess::core_); }
};
inline ReactorCore& coreOf(const Reactor& reactor) noexcept { return ReactorCoreAccess::of(reactor); }

}  // namespace evrdma
