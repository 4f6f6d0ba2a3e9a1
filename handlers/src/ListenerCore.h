// ListenerCore: what a Listener holds behind its API: the listening id and the answer to each
// connect request (limits, the factory, the waiting line), its own agents' home, the worker pool,
// the drain, and its figures. Not installed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CmEvent.h"
#include "ReactorMember.h"
#include "evrdma/Listener.h"

struct sockaddr_storage;

namespace evrdma {

class CmDispatcher;

namespace detail {
class AgentHome;
class Drain;
class WaitingLine;
class WorkerPool;
}  // namespace detail

class ListenerCore final : public CmEventHandler, public detail::ReactorMember {
 public:
  ListenerCore(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options);
  ~ListenerCore();
  ListenerCore(const ListenerCore&) = delete;
  ListenerCore& operator=(const ListenerCore&) = delete;

  // The Listener's Ptr was dropped: stop, close, and call `deleteListener` (which frees this too)
  // once the last agent has gone, on a later turn; at once if the Reactor is gone already.
  void release(std::function<void()> deleteListener) noexcept;

  // The Listener's API (see Listener.h).
  int listen(const std::string& address, uint16_t port, int backlog) noexcept;
  uint16_t port() const noexcept;
  void close() noexcept;
  void drain(std::chrono::milliseconds grace, std::function<void()> drained);
  bool draining() const noexcept;
  size_t agentCount() const noexcept;
  void forEachAgent(const std::function<void(Agent&)>& fn) const;
  size_t forEachAgentFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const;
  ConnectionCounts agentsByState() const noexcept;
  ConnectionStats agentTotals() const noexcept;
  std::vector<WorkerFigures> workerFigures() const;
  const ListenerStats& stats() const noexcept { return stats_; }
  uint64_t unestablishedMemory() const noexcept;
  Reactor& reactor() const noexcept { return reactor_; }

  void onCmEvent(const CmEvent& event) noexcept override;
  void onReactorGone() noexcept override;  // may free the listener

 private:
  // One listening id bound to `local`, made id_: 0 or -errno (EADDRINUSE: the port is taken).
  int bindAndListen(CmDispatcher& cm, sockaddr_storage& local, int backlog) noexcept;
  void onConnectRequest(const CmEvent& event) noexcept;
  // Asks the factory, then admits the request here or hands it to a worker; or rejects it.
  void answer(const CmEvent& event) noexcept;
  // Sets up the admitted requests and answers the waiting ones, as far as this turn allows.
  void serveLines() noexcept;
  // An event for a request still waiting its turn (its client gave up): true if it was one.
  bool onWaitingRequestEvent(const CmEvent& event) noexcept;
  // Stops listening and rejects every request not set up yet with `reason`.
  void stopListening(const char* reason) noexcept;
  void closeAgents() noexcept;

  Reactor& reactor_;
  AgentFactory& factory_;
  ListenerOptions options_;
  CmId id_;
  ListenerStats stats_;
  // Requests past acceptsPerTurn, oldest first.
  std::unique_ptr<detail::WaitingLine> waiting_;
  // Its own agents (not those on its workers), the requests admitted for them, the turn's pace.
  std::unique_ptr<detail::AgentHome> home_;
  std::function<void()> deleteListener_;  // set once released
  bool orphaned_ = false;  // the Reactor was destroyed first
  std::unique_ptr<detail::WorkerPool> workers_;  // with ListenerOptions::workers
  std::unique_ptr<detail::Drain> drain_;
};

}  // namespace evrdma
