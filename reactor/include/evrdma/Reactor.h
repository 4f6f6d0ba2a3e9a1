/// \file
/// Reactor: the event loop evrdma runs on: a libevent event_base, borrowed from the application or
/// owned. Everything evrdma watches (CM events, completions, timers, signals, sockets) is an event on
/// that one base, serviced by one thread: the one that runs the loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/CompletionStats.h"
#include "evrdma/DeviceCounters.h"
#include "evrdma/MemoryCharge.h"
#include "evrdma/ConnectionState.h"


struct event_base;

namespace evrdma {

class ReactorCore;

/// What the Reactor's RDMA CM event channel did (all zero before its first use).
struct CmEventStats {
  uint64_t dispatched = 0;      ///< events handed to a connection or listener
  uint64_t withoutHandler = 0;  ///< events for an id nobody owned any more (dropped)
  uint64_t budgetYields = 0;    ///< turns that stopped at the budget and left the rest for later
  /// Events read out of the channel, waiting for their turn now (a Reactor reads ahead of what it
  /// dispatches: the kernel walks every unread event on each id's destruction), and the most ever.
  uint64_t waiting = 0;
  uint64_t mostWaiting = 0;
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
  ConnectionCounts connections;      ///< clients and agents on this Reactor now, by state (kept as they move: no walk)
  uint64_t registeredMemory = 0;     ///< see registeredMemory()
  uint64_t memoryBudget = 0;
  uint32_t connectsInFlight = 0;
  size_t connectsWaiting = 0;
};

/// Lifetimes. Destroying the Reactor is final and silent (byte streams still sending first get up
/// to linger() to finish: see setLinger): every Client, Listener (with its
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

  bool valid() const noexcept;
  event_base* base() const noexcept;
  bool ownsBase() const noexcept;

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
  bool acceptsPosts() const noexcept;
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
  void setPollingWindow(std::chrono::microseconds window) noexcept;
  std::chrono::microseconds pollingWindow() const noexcept;
  /// Adaptive polling that follows the traffic: the window stretches to cover the gap between
  /// completions the loop last slept through, up to `most`. A ping-pong whose round trip is
  /// longer than the window (large messages) otherwise sleeps through every round trip and pays a
  /// wake-up for each answer. Once the loop wakes from a sleep shorter than `most` (measured from
  /// the last completion), the next windows last 1.5 x that gap; a stretched window that passes
  /// with nothing falls back to the window. It reads the clock once per wake-up. The core it
  /// spends while traffic flows is that of a window as long: set it to the longest wait worth a
  /// core. 0 (or at most the window), the default: no stretching.
  void setPollingStretch(std::chrono::microseconds most) noexcept;
  std::chrono::microseconds pollingStretch() const noexcept;

  /// How long one loop turn may spend handing out completions (the handlers' work included)
  /// before the loop serves its sockets, timers and signals again; what is left waits for the next
  /// turn. The count per turn follows from what completions have lately cost (read from the clock
  /// only in turns that hand out more than one poll's worth), within 16 .. 256, and at least one
  /// poll's worth per completion queue. Shorter: the application's own events wait less under an
  /// RDMA flood, and the flood goes a little slower. 0: 256 per turn, whatever they cost.
  static constexpr std::chrono::microseconds kDefaultTurnBudget{500};
  void setTurnBudget(std::chrono::microseconds budget) noexcept;
  std::chrono::microseconds turnBudget() const noexcept;

  /// How long destroying the Reactor may wait for the byte streams still sending (SO_LINGER's
  /// time): a stream the program freed (or still holds) whose bytes have not all gone out sends
  /// them, then its FIN, and disconnects, so the peer reads every byte, then EOF; the destructor
  /// returns once every such stream is done, or after `linger`, whichever comes first. Meanwhile
  /// only evrdma's own channels are served (a poll(2) of the CM and completion channels): no
  /// callback of the application's runs, and nothing else on the event_base does. 0: no wait,
  /// the streams are reset (the peer hears ECONNRESET), as SO_LINGER 0 does. Streams still
  /// connecting are dropped, as a connecting socket's close drops what was written. Messages
  /// (Connection) do not linger: their close contract is close() and onClosed.
  static constexpr std::chrono::milliseconds kDefaultLinger{5000};
  void setLinger(std::chrono::milliseconds linger) noexcept;
  std::chrono::milliseconds linger() const noexcept;

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

 protected:
  /// What the Reactor holds behind this API (not installed: an application has nothing to do with
  /// it; evrdma's own objects reach it without an accessor here).
  std::unique_ptr<ReactorCore> core_;
};

}  // namespace evrdma
