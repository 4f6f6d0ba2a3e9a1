/// \file
/// Reactor: the event loop evrdma runs on: a libevent event_base, borrowed from the application or
/// owned. Everything evrdma watches (CM events, completions, timers, signals, sockets) is an event on
/// that one base, serviced by one thread: the one that runs the loop.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "evrdma/CompletionStats.h"
#include "evrdma/DeviceCounters.h"
#include "evrdma/MemoryCharge.h"
#include "evrdma/ConnectionState.h"


struct event;
struct event_base;
struct ibv_context;

namespace evrdma {

class CmDispatcher;
class Device;

namespace detail {
class ConnectGate;
class Mailbox;
class MemoryAccount;
class ReactorMember;  ///< what to close when the Reactor goes first (reactor/src/ReactorMember.h)
class NextTurn;
class TurnQueue;
class EventHolder;
class QueuePair;
}  // namespace detail

/// What the Reactor's RDMA CM event channel did (all zero before its first use).
struct CmEventStats {
  uint64_t dispatched = 0;      ///< events handed to a connection or listener
  uint64_t withoutHandler = 0;  ///< events for an id nobody owned any more (dropped)
  uint64_t budgetYields = 0;    ///< turns that stopped at the budget and left the rest for later
};

/// What the shared receive queues of a Reactor hold and did (ConnectionOptions::sharedReceiveQueue):
/// one SRQ per device and receive buffer size (another when one is full), fed from a pool of
/// registered buffers that grows when the device says it runs low.
struct SharedReceiveStats {
  uint32_t queues = 0;
  uint64_t connections = 0;         ///< connections receiving through them now
  uint64_t buffers = 0;             ///< receive buffers in their pools
  uint64_t posted = 0;              ///< of which posted to the device now (the rest: in onRecv)
  uint64_t reserved = 0;            ///< buffers guaranteed to connections (framed credits; iWARP)
  uint64_t registeredBytes = 0;     ///< what the pools pin
  uint64_t lowWatermarkEvents = 0;  ///< the device said fewer than a quarter were posted
  uint64_t growths = 0;             ///< times a pool grew past its first chunk
  uint64_t growthRefusals = 0;      ///< a pool that should have grown could not (full, or the budget)

  /// Sums another Reactor's (e.g. the workers' of a Listener).
  SharedReceiveStats& operator+=(const SharedReceiveStats& other) noexcept {
    queues += other.queues;
    connections += other.connections;
    buffers += other.buffers;
    posted += other.posted;
    reserved += other.reserved;
    registeredBytes += other.registeredBytes;
    lowWatermarkEvents += other.lowWatermarkEvents;
    growths += other.growths;
    growthRefusals += other.growthRefusals;
    return *this;
  }
};

/// A snapshot of what one device's completion channel on a Reactor counted.
struct DeviceStats {
  std::string device;  ///< its name (rxe0, siw0, mlx5_0...)
  CompletionStats completions;
  RnrCounters rnr;     ///< the port's, device-wide (not available on every device)
};

/// A snapshot of a Reactor's statistics (Reactor::stats()): nothing in it needs a live connection.
struct ReactorStats {
  CmEventStats cmEvents;
  std::vector<DeviceStats> devices;  ///< each device used on this Reactor, by name
  SharedReceiveStats sharedReceives;
  ConnectionCounts connections;      ///< clients and agents on this Reactor now, by state
  uint64_t registeredMemory = 0;     ///< see registeredMemory()
  uint64_t memoryBudget = 0;
  uint32_t connectsInFlight = 0;
  size_t connectsWaiting = 0;
};

/// Lifetimes. Destroying the Reactor is final and silent: every Client, Listener (with its
/// Agents), Timer and watch still on it is closed at once, its RDMA resources released, and no
/// callback fires (no onError, no onClosed); closures still deferred are destroyed without
/// running. What the application still holds (a Client::Ptr, a Listener::Ptr, a Timer) stays a
/// closed shell: its calls fail (-ESHUTDOWN, -ENOTCONN) and dropping it frees it. Memory the
/// application registered on a device's protection domain must be gone before the Reactor.
/// Do not destroy a Reactor that owns its base from inside one of that base's callbacks.
class Reactor {
 public:
  /// Owns a new event_base, freed with the Reactor. Check valid(): libevent can fail to make one.
  Reactor();
  /// Borrows the application's event_base: evrdma adds its events there and never frees it.
  /// The base must outlive the Reactor and everything created on it.
  explicit Reactor(event_base* borrowed);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  bool valid() const noexcept { return base_ != nullptr && deferEvent_ != nullptr; }
  event_base* base() const noexcept { return base_; }
  bool ownsBase() const noexcept { return ownsBase_; }

  /// Runs the loop until stop() (it does not return just because nothing is pending).
  /// Returns 0, or -1 if libevent failed.
  int run() noexcept;
  /// Makes run() (or the application's own event_base_dispatch) return after the current callback.
  void stop() noexcept;

  /// Runs `fn` on the loop after the current callback has returned (or at the next loop turn when
  /// called from outside a callback), in the order deferred. What a deferred closure defers runs
  /// on a later turn, after the loop has polled its sockets, signals and timers. Safe from any
  /// callback. Never call it from another thread. Dropped (not run) once the Reactor is dying.
  void defer(std::function<void()> fn);
  /// At most this many connections take their last step of teardown (QP and id destroyed, then
  /// onClosed) per loop turn: many closed at once are spread over turns, the loop's other work
  /// served in between.
  static constexpr size_t kTeardownsPerTurn = 2;
  /// Lets other threads hand work to this Reactor with post(): from now on the Reactor watches an
  /// eventfd of its own, so its base always has an event (an application's event_base_dispatch
  /// without EVLOOP_NO_EXIT_ON_EMPTY no longer returns for want of events). Call it on the loop's
  /// thread, or before the loop runs (ReactorThread does). 0 or -errno.
  int acceptPosts() noexcept;
  bool acceptsPosts() const noexcept { return acceptsPosts_; }
  /// The one call that is safe from any thread (while the Reactor lives, once it accepts posts):
  /// runs `fn` on the loop's thread, on a turn soon after, in the order posted. How work reaches a
  /// Reactor that runs on another thread (ListenerOptions::workers, ReactorThread). Dropped unrun if
  /// the Reactor is destroyed first. 0, or -ENOTSUP if acceptPosts() was never called.
  [[nodiscard]] int post(std::function<void()> fn);

  /// Adaptive polling: after a completion, poll this Reactor's completion queues on every loop turn
  /// for `window` instead of arming them and waiting for an event (a wake-up costs what a short
  /// round trip does). Each of those turns goes through libevent's backend with a zero timeout, so
  /// the application's sockets, timers and signals are served in between; a window with nothing
  /// in it ends with the queues armed and the loop asleep, as without polling. It spends a core
  /// while traffic flows (and `window` after the last completion, timed from the 8th turn without
  /// one: the clock is read only every 8th such turn), nothing when idle. 0, the default: never.
  /// Polling never blocks: the loop's thread stays the application's.
  void setPollingWindow(std::chrono::microseconds window) noexcept { pollingWindow_ = window; }
  std::chrono::microseconds pollingWindow() const noexcept { return pollingWindow_; }

  CmEventStats cmEventStats() const noexcept;
  SharedReceiveStats sharedReceiveStats() const noexcept;
  /// Everything above and below in one snapshot, with each device's completion statistics. Call it
  /// on the loop's thread (a worker Reactor's: post() a closure that takes it there).
  ReactorStats stats() const;

  /// Memory evrdma's connections on this Reactor have registered with their devices (their
  /// buffers, the shared slabs of small buffers, the regions lent to peers), in bytes, and its
  /// budget. Past the budget a connection that needs more fails to set up (a Listener rejects its
  /// request: "memory budget: X of Y KiB in use, a connection needs Z KiB, the budget holds ~N")
  /// and a peer's requestRegion() is refused with -ENOMEM. 0, the default: no budget of evrdma's
  /// own; the process's RLIMIT_MEMLOCK still applies (and its failures are named as such). Memory
  /// the application registers itself is counted only if it charges it (chargeMemory).
  void setMemoryBudget(uint64_t bytes) noexcept;
  uint64_t memoryBudget() const noexcept;
  uint64_t registeredMemory() const noexcept;
  /// Counts `bytes` the application registers itself (its own MemoryRegions) in registeredMemory()
  /// and against the budget while `out` lives, so that they and evrdma's connections share one
  /// budget. 0, or -ENOBUFS past the budget (`out` left empty: don't register them). Call it on
  /// the loop's thread.
  int chargeMemory(uint64_t bytes, MemoryCharge& out) noexcept;
  /// The most clients of this Reactor with a connect request on the wire at once (0: no limit;
  /// default 64). A burst of thousands overflows the peers' connection managers, which drop what
  /// does not fit and hear it again only after their response timeout, seconds later; past the
  /// limit a client waits (in order, not counted against its connectTimeout) until one in flight
  /// is answered.
  void setMaxConnectsInFlight(uint32_t limit) noexcept;
  uint32_t maxConnectsInFlight() const noexcept;
  /// Clients whose connect request is on the wire now, and clients waiting for their turn.
  uint32_t connectsInFlight() const noexcept;
  size_t connectsWaiting() const noexcept;

 private:
  /// What evrdma's own objects use of their Reactor; nothing for an application here.
  friend class CmDispatcher;
  friend class Device;
  friend class Connection;
  friend class Client;
  friend class Listener;
  friend class detail::EventHolder;
  friend class detail::QueuePair;

  /// The CM event channel of this reactor, made on first use. Null, with `error` = -errno, when the
  /// machine has no RDMA CM (e.g. no rdma_ucm module).
  CmDispatcher* cm(int& error);
  /// What this reactor holds of one device (its PD, buffers, SRQs, completion channel and CQs),
  /// made on first use; null + -errno.
  Device* device(ibv_context* context, int& error);
  /// Runs a connection's last step of teardown (destroying its QP and id, onClosed) on a later
  /// turn, at most kTeardownsPerTurn per turn: many connections closed at once would otherwise
  /// cost one long turn (about 3 ms each on the test bed) while the others wait.
  void deferTeardown(std::function<void()> fn);

  /// Frees what this reactor held of a removed device once nothing uses it (see
  /// Device::markRemoved); the next use of the device makes a new one.
  void releaseDevice(ibv_context* device) noexcept;
  /// The CM reported that `device` is being removed (see Device::markRemoved).
  void deviceRemoved(ibv_context* device) noexcept;

  /// For evrdma's own objects: what to close when the Reactor goes first (see ReactorMember).
  void join(detail::ReactorMember* member) { members_.insert(member); }
  void leave(detail::ReactorMember* member) noexcept { members_.erase(member); }
  /// True while ~Reactor runs: nothing new may be started.
  bool dying() const noexcept { return dying_; }
  detail::MemoryAccount& memoryAccount() noexcept { return *memory_; }
  detail::ConnectGate& connectGate() noexcept { return *connectGate_; }

  void makeDeferEvents() noexcept;
  static void onDeferEvent(int, short, void* self) noexcept;
  void runDeferred() noexcept;

  event_base* base_ = nullptr;
  bool ownsBase_ = false;
  /// Before the members that charge it (destroyed after them).
  std::shared_ptr<detail::MemoryAccount> memory_;  ///< shared with the application's MemoryCharges
  std::unique_ptr<detail::ConnectGate> connectGate_;
  bool dying_ = false;
  event* deferEvent_ = nullptr;
  /// Closures deferred by deferred closures run on a later turn, after the backend poll and the
  /// timers: a chain of them can never starve the loop.
  std::unique_ptr<detail::NextTurn> deferLater_;
  std::unique_ptr<detail::TurnQueue> teardowns_;  ///< deferTeardown
  std::unique_ptr<detail::Mailbox> mailbox_;  ///< Reactor::post, from other threads
  std::atomic<bool> acceptsPosts_{false};     ///< read by posting threads
  bool runningDeferred_ = false;
  std::chrono::microseconds pollingWindow_{0};
  std::vector<std::function<void()>> deferred_;
  std::unordered_set<detail::ReactorMember*> members_;
  /// What each device's completion channel counted, kept for the Reactor's lifetime (also after a
  /// removed device's channel is gone: Connection::completionStats() points here). One per channel
  /// ever made; a deque never moves its elements.
  std::deque<CompletionStats> completionStats_;
  /// Destroyed in this order by ~Reactor: the members first (their CQ reservations and ids must go
  /// before the channels), then the devices (their completion channels), then the CM channel.
  std::map<ibv_context*, std::unique_ptr<Device>> devices_;
  std::unique_ptr<CmDispatcher> cm_;
};

}  // namespace evrdma
