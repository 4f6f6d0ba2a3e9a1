// ConnectionCore: what a Connection holds behind its API: the options, the application's handler,
// the cm_id and the explicit state, the verbs parts (QueuePair, FramedSender, LendingPool,
// RegionExchange), and the CM state machine: one switch over every event in every state (the
// table in evrdma/Connection.h). It receives every event of the connection (CM events,
// completions, device events, the Reactor's end, the region exchange's news) and hands each to
// its part: ConnectionSender, ConnectionReceiver, ConnectionTeardown. A role (ClientCore,
// AgentCore) implements the hooks its states can meet. Not installed.
//
// Its fields are open to its parts, which are its own rooms; nothing else but the roles, the
// Connection facade and StreamPort.cpp (the port a byte stream reaches its connection through)
// includes this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "AlignedTicks.h"
#include "CmEvent.h"
#include "CompletionDispatcher.h"
#include "ConnectionLife.h"
#include "ConnectionReceiver.h"
#include "ConnectionSender.h"
#include "ConnectionTally.h"
#include "ConnectionTeardown.h"
#include "ReactorMember.h"
#include "RegionExchange.h"
#include "evrdma/Callbacks.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/Connection.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/ConnectionState.h"
#include "evrdma/Verbs.h"
#include "evrdma/Watch.h"

namespace evrdma {

class Connection;
class CreditLedger;
class Reactor;

namespace detail {
class QueuePair;
class FramedSender;
class LendingPool;
class PreparedMappings;
class Liveness;
}  // namespace detail

class ConnectionCore : public CmEventHandler,
                       public CompletionHandler,
                       public detail::ReactorMember,
                       public detail::RegionExchange::Events {
 public:
  ConnectionCore(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ConnectionOptions& options,
                 bool isClient);
  virtual ~ConnectionCore();
  ConnectionCore(const ConnectionCore&) = delete;
  ConnectionCore& operator=(const ConnectionCore&) = delete;

  // The object the application holds, given to every callback; set once, by Connection's
  // constructor, before any event can come.
  void attach(Connection& facade) noexcept { facade_ = &facade; }
  Connection& facade() const noexcept { return *facade_; }

  // ---- For the roles.
  // Makes `id` this connection's (its events come here from now on).
  void adoptId(CmId id) noexcept;
  // The queue pair and its resources on the id's device (large buffers in `prepared`'s memory
  // where it holds some); posts every receive. Returns 0 or -errno and names the failing call in
  // `op`.
  int setUpVerbs(const char*& op, detail::PreparedMappings* prepared = nullptr) noexcept;
  // The connection parameters from the options, carrying `privateData` (which must outlive use).
  rdma_conn_param connParam(const std::vector<uint8_t>& privateData) const noexcept;
  void fail(int err, const char* op) noexcept { teardown.fail(err, op); }
  void failLater(int err, const char* op) noexcept { teardown.failLater(err, op); }
  bool closing() const noexcept { return detail::isClosing(life_); }
  bool orphaned() const noexcept { return life_ == detail::Life::Orphaned; }
  bool sendable() const noexcept { return life_ == detail::Life::Established; }
  // What the application is told (Connection::state), from life_ and the outcome.
  ConnectionState state() const noexcept { return detail::publicState(life_, teardown.failed()); }
  // Every change of life_ goes through here: the counts by state this connection is in (its
  // Reactor's, its group's) move with it, so that counting takes no walk.
  void setLife(detail::Life next) noexcept;
  // Counted in a group from now on (an agent in its Listener's): its state in `counts`, its
  // figures from now on in `stats`. Until it is destroyed.
  void joinGroup(ConnectionCounts& counts, ConnectionStats& stats) noexcept;
  bool supportsImmediateData() const noexcept;
  void close() noexcept { teardown.close(); }

  // ---- The role's part of the CM state machine. Each is called only in the state named.
  // ResolvingAddr: ADDR_RESOLVED (client).
  virtual void onAddressResolved() noexcept {}
  // ResolvingRoute: ROUTE_RESOLVED (client).
  virtual void onRouteResolved() noexcept {}
  // Connecting / Accepting: the peer rejected (REJECTED).
  virtual void onConnectRejected(const CmEvent& event) noexcept = 0;
  // Connecting / Accepting: UNREACHABLE or CONNECT_ERROR.
  virtual void onConnectFailed(const CmEvent& event) noexcept = 0;
  // The connection is up, whichever announced it first (ESTABLISHED or a receive).
  virtual void onEstablishedByRole() noexcept {}
  // Framed, an agent: the transport is up and the client's hello is awaited.
  virtual void onAwaitingHello() noexcept {}
  // After onClosed: the owner frees the object (deferred).
  virtual void onFinished() noexcept = 0;
  // The Reactor is gone and every resource with it; no callback may fire. The owner may free the
  // object now (a Client whose Ptr was dropped does).
  virtual void onOrphaned() noexcept {}

  // ---- For the parts.
  // The transport is up (ESTABLISHED, or the first receive that beats it: `peerSpoke`):
  // unframed, the connection is established; framed, our hello goes out (the agent's only once
  // the client's has arrived) and the peer's is awaited.
  void transportUp(bool peerSpoke) noexcept;
  // The peer's first work reached us (a receive completed, even in error): the connection is up,
  // whatever the CM has said so far.
  void notePeerReached() noexcept;
  // The connection is established for the application (onEstablished).
  void markEstablished() noexcept;
  // What receiving sets off on the send side, in one place, after the receive path has delivered:
  // credits came back or are owed and a keepalive reply may be owed (the framed line and a credit
  // frame go), the backlog may have drained (onWritable); then whether the close can finish.
  void afterReceiving() noexcept;
  // Messages either way and operations completed: what idleTimeout watches.
  uint64_t activity() const noexcept;
  void stopLivenessChecks() noexcept {
    livenessTick_.cancel();
    if (creditTimer_) creditTimer_->cancel();
  }

  Reactor& reactor_;
  std::unique_ptr<ConnectionHandler> handler_;
  std::unique_ptr<ConnectionHandler> silenced_;  // the application's, while the Reactor lingers
  ConnectionOptions options_;
  std::string peerAddress_ = "?";
  const bool isClient_;
  detail::Life life_ = detail::Life::Idle;  // the one state of its life (ConnectionLife.h)
  bool helloSent_ = false;          // framed: our hello is out
  mutable int8_t immediateData_ = -1;  // supportsImmediateData, once the device is known (-1: not yet)
  bool peerReached_ = false;        // a receive completed: the transport is up (see notePeerReached)
  bool cmEstablished_ = false;      // the CM's ESTABLISHED event arrived
  uint64_t peerMaxMessageSize_ = 0;  // framed: from the peer's hello
  std::string errorText_;           // keeps an onError `op` alive while the callback runs
  detail::ConnectionTally tally_;  // its figures, and its group's (ConnectionTally.h)
  std::chrono::steady_clock::time_point createdAt_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point establishedAt_{};
  const CompletionStats* completionStats_ = nullptr;
  ibv_context* device_ = nullptr;

  // Declared in creation order: destroyed in reverse (the parts, then the id).
  CmId id_;
  std::unique_ptr<detail::QueuePair> queuePair_;
  std::unique_ptr<CreditLedger> flowControl_;               // framed: both directions' credits
  std::unique_ptr<detail::FramedSender> framedSender_;      // framed connections only
  std::unique_ptr<detail::LendingPool> lendingPool_;        // lendingPoolBytes: outlives what it lent
  std::unique_ptr<detail::RegionExchange> regionExchange_;  // framed connections only

  detail::ConnectionTeardown teardown;
  detail::ConnectionSender sender;
  detail::ConnectionReceiver receiver;

 private:
  // CmEventHandler, CompletionHandler, ReactorMember, RegionExchange::Events.
  void onCmEvent(const CmEvent& event) noexcept override;
  void onCompletion(const ibv_wc& wc) noexcept final;
  // What a receive says of the transport, before the receiver takes it (while the peer is not
  // yet reached or the connection not established): the peer reached us; connecting, it is up.
  // Out of line and cold: the receive path's common case (established, peer reached) skips it.
  [[gnu::cold, gnu::noinline]] void noteTransport(const ibv_wc& wc) noexcept;
  void onAsyncError(ibv_event_type type) noexcept override;
  void onCompletionQueueError(int err, const char* op) noexcept override;
  void onDeviceRemoved() noexcept override { teardown.onDeviceRemoved(); }
  void onPollBegin(int receives) noexcept final;
  void onPollEnd() noexcept final;
  void onPoll(const ibv_wc* wcs, int n, int receives) noexcept final;
  void onReactorGone() noexcept override {
    livenessTick_.cancel();    // while the Reactor's ticks are still there
    teardown.onReactorGone();  // may free the connection
  }
  // The Reactor lingers: an application's handler is swapped for a silent one (kept alive in
  // silenced_); a stream's (LingeringHandler) goes on.
  void beforeLinger() noexcept override;
  bool connectionState(ConnectionState& state) const noexcept override;
  void onGranted(uint64_t tag, const RemoteRegion& region) noexcept override;
  void onRefused(uint64_t tag, int err) noexcept override;
  void onReceived(const RemoteRegion& region, uint64_t tag) noexcept override;
  void onLent(const MemoryRegion& region) noexcept override;
  void onReleased(const MemoryRegion& region) noexcept override;

  void onDisconnectedEvent() noexcept;
  void afterPeerDisconnected() noexcept;  // what the peer sent before it left was handed out
  // keepaliveInterval / idleTimeout: starts the liveness checks (once established).
  void startLivenessChecks() noexcept;
  void onLivenessTick(std::chrono::steady_clock::time_point now) noexcept;
  // creditTimeout: the line began to wait for credits; each quarter of the timeout, whether it
  // moved since.
  void onCreditWaitBegan() noexcept;
  void onCreditTick() noexcept;

  Connection* facade_ = nullptr;
  bool pollBatch_ = false;  // this poll's callbacks send in one batch (onPollBegin)
  // Liveness (keepaliveInterval, idleTimeout): counters compared at each tick, so the data path
  // only counts. The ticks of the Reactor's connections come together (AlignedTicks).
  detail::AlignedTick livenessTick_;
  std::unique_ptr<detail::Liveness> liveness_;  // once established, with keepalive or idleTimeout
  // creditTimeout: made at the first wait for credits, ticking only while the line waits.
  std::unique_ptr<Timer> creditTimer_;
  uint64_t creditsSpentMark_ = 0;  // FramedSender::creditsSpent() at the last tick that saw it move
  uint32_t quietCreditTicks_ = 0;  // ticks since, the line waiting throughout
};

// The core of `connection`, for evrdma's own objects. Connection.h offers no accessor and
// befriends nothing: its core_ is protected, and a class derived from Connection (never made)
// names it here.
struct ConnectionCoreAccess : Connection {
  // A pointer to the protected member, named through this class: it applies to any Connection.
  static ConnectionCore& of(const Connection& connection) noexcept {
    return *(connection.*&ConnectionCoreAccess::core_);
  }
};
inline ConnectionCore& coreOf(const Connection& connection) noexcept { return ConnectionCoreAccess::of(connection); }

}  // namespace evrdma
