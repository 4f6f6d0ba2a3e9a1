/// \file
/// Listener: binds and listens, and turns each connect request into an Agent, or rejects it with a
/// reason the client can read, as its AgentFactory decides. It owns its Agents.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Agent.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Verbs.h"
#include "evrdma/Watch.h"

namespace evrdma {

class Reactor;
class ListenerCore;

/// Where a walk over a Listener's agents in slices stands (Listener::forEachAgentFrom): start
/// with a default one, pass the same one to each call.
struct AgentWalk {
  uintptr_t after = 0;  ///< evrdma's: where the last agent visited stands in the walk's order
  bool done = false;    ///< no agent is left after the last one visited
};

struct ListenerStats {
  uint64_t requests = 0;
  uint64_t accepted = 0;
  uint64_t rejected = 0;       ///< by the factory, past maxAgents, or because the agent could not be set up
  uint64_t rejectedBusy = 0;   ///< of those: past maxAgents
  /// Requests whose client gave up before we accepted (its connect timed out while the request
  /// waited in the backlog, or it went away): not rejected, not failed. Seen before the factory
  /// is asked, the factory never hears of it; seen later (the client refused our accept), the
  /// agent's handler hears onClosed only, without onError, and the agent never was established.
  uint64_t abandoned = 0;
  uint64_t agentsClosed = 0;
  uint64_t heldForLaterTurn = 0;  ///< requests past acceptsPerTurn, answered on a later turn
  uint64_t rejectedWaiting = 0;   ///< rejected because maxWaitingRequests waited already
  uint64_t rejectedByFactory = 0;  ///< the factory said no (its reason went to the client)
  uint64_t rejectedSetup = 0;      ///< the agent could not be set up (memory budget, device limits...)
  uint64_t rejectedClosing = 0;    ///< the listener was closing or draining
  /// Framed agents whose client completed the connection but said no hello (its first frame)
  /// within ListenerOptions::helloTimeout: closed with -ETIMEDOUT (counted in agentsTimedOut too).
  uint64_t silentClosed = 0;
  /// Framed agents silent (no hello) for at least ListenerOptions::kEvictSilentAfter, closed
  /// before their helloTimeout because requests waited for the memory they held.
  uint64_t silentEvicted = 0;
  uint64_t agentsFailed = 0;       ///< of agentsClosed: ended by an error (Connection::error())
  uint64_t agentsTimedOut = 0;     ///< of those: -ETIMEDOUT (accept, keepalive or idle timeout)
  /// Accepted requests that waited because agents not yet established held
  /// ListenerOptions::maxUnestablishedMemory already (set up once some of that came back).
  uint64_t heldForMemory = 0;
  uint64_t mostUnestablishedMemory = 0;  ///< the most pinned at once for agents not yet established
  /// Bytes of agents' large buffers populated ahead, a piece per loop turn, before they were
  /// registered; and the most populated in one turn (at most kPopulatePerTurn, or one page).
  uint64_t populatedAhead = 0;
  uint64_t mostPopulatedInOneTurn = 0;
};

/// Admission control: what a Listener takes on before it refuses.
struct ListenerOptions {
  /// Lets the port be bound while connections accepted on it before live on (a listener freed
  /// and made again), as SO_REUSEADDR does for TCP (RDMA_OPTION_ID_REUSEADDR).
  bool reuseAddress = false;
  /// Bound to an IPv6 address (the wildcard above all), takes IPv6 peers only, as IPV6_V6ONLY
  /// (RDMA_OPTION_ID_AFONLY). Else the kernel's default (net.ipv6.bindv6only).
  bool ipv6Only = false;
  /// The most agents at once (0: no limit); past it a request is rejected with "server busy: N
  /// agents (maxAgents)" before the factory is asked, and nothing is allocated for it.
  size_t maxAgents = 0;
  /// How long an accepted agent may wait for the client to complete the connection (0: for ever);
  /// then it fails with -ETIMEDOUT and its resources go back.
  std::chrono::milliseconds acceptTimeout{10000};
  /// Framed connections (byte streams among them): how long an agent waits for the client's hello
  /// once the client completed the connection (0: acceptTimeout alone bounds it). evrdma's clients
  /// say hello at once; a peer that stays silent holds the agent's buffers for nothing. Past it
  /// the agent fails with -ETIMEDOUT (ListenerStats::silentClosed).
  std::chrono::milliseconds helloTimeout{5000};
  /// While accepted requests wait for the memory of agents not yet established
  /// (maxUnestablishedMemory), the agent silent longest is closed to make room once it has been
  /// silent (connected, no hello) this long (ListenerStats::silentEvicted): a flood of silent
  /// connections then costs a good client a short wait, not a lock-out.
  static constexpr std::chrono::milliseconds kEvictSilentAfter{1000};
  /// The most connect requests answered in one loop turn (0: no limit). Setting up an agent
  /// (queue pair, registered buffers, the accept) costs milliseconds under load; answering a
  /// storm of requests in one go would keep every connected peer, timer and socket of the loop
  /// waiting. Past it, requests wait for later turns, in the order they came; a client that gives
  /// up meanwhile is counted as abandoned.
  uint32_t acceptsPerTurn = 4;
  /// The most requests waiting for their turn; past it a request is rejected "server busy: N
  /// requests waiting to be accepted". (Each waiting request holds its private data and a CM id.)
  size_t maxWaitingRequests = 16384;
  /// The most memory pinned at once for agents accepted but not yet established (their buffers
  /// are registered before the accept, and a client that never completes its connect holds them
  /// until acceptTimeout). 0: a quarter of the Reactor's memory budget (a worker's: its own), or
  /// 256 MiB when it has none. Past it, accepted requests wait their turn, in order, until agents
  /// are established or end (a request that does not fit lets smaller ones behind it go first, and
  /// requests over an eighth of the bound share three quarters of it, the rest kept for small
  /// ones); one request is always let through when no other holds any, however large (the memory
  /// budget still bounds it).
  uint64_t maxUnestablishedMemory = 0;
  /// One loop per core: Reactors that run on other threads and accept posts (Reactor::acceptPosts;
  /// a ReactorThread's does; listen() gives -EINVAL for one that does not), each accepted
  /// connection handed to the one with the fewest agents. The Listener's own Reactor listens and
  /// its factory decides there; the request's CM id then moves to the worker's event channel
  /// (rdma_migrate_id), where its queue pair, buffers and completions are set up and its handler
  /// runs from then on: what handlers share across workers must be thread-safe. The workers must
  /// live until the Listener is dropped, and the factory until its agents are gone (dropping the
  /// Listener closes the agents on their workers, each worker's once its loop has run them to
  /// onClosed; destroying a worker's Reactor closes its agents silently, as ~Reactor does).
  std::vector<Reactor*> workers;
};

/// What the agents handed to one worker did (Listener::workerFigures), read from any thread.
struct WorkerFigures {
  size_t agents = 0;        ///< on the worker now (handed over, not yet closed)
  uint64_t accepted = 0;    ///< set up and accepted there
  uint64_t rejected = 0;    ///< could not be set up there (the client was told why)
  uint64_t abandoned = 0;   ///< the client gave up before the accept reached it
  uint64_t closed = 0;
  /// Handed over past acceptsPerTurn, set up on a later turn of the worker's loop; and the most it
  /// set up in one turn (at most acceptsPerTurn, when that is not 0).
  uint64_t heldForLaterTurn = 0;
  uint32_t mostInOneTurn = 0;
  uint64_t heldForMemory = 0;  ///< waited for maxUnestablishedMemory (the worker's own)
};

class Listener final {
 public:
  /// Dropping a Ptr stops listening, closes every agent, and frees the Listener once the last agent
  /// has closed; safe from inside callbacks.
  struct Release {
    void operator()(Listener* listener) const noexcept;
  };
  using Ptr = std::unique_ptr<Listener, Release>;

  /// `factory` is borrowed: it must outlive the Listener.
  static Ptr create(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options = {});

  /// Binds to a numeric IPv4/IPv6 address ("0.0.0.0" or "::" for all) and port (0: any free one)
  /// and listens. Returns 0 or -errno: -EINVAL (not a numeric address), -EADDRINUSE (port taken),
  /// -EADDRNOTAVAIL (not an address of this machine), -ENODEV (no RDMA CM, or no RDMA device
  /// serves that address: its netdev has none, or its device was removed), -EALREADY,
  /// -ESHUTDOWN (its Reactor is gone). `backlog`: connect requests the kernel keeps waiting for us
  /// before it drops new ones (the client then retries seconds later); 0, the default, or anything
  /// above the kernel's limit means that limit (net.rdma_ucm.max_backlog, 1024 unless changed: see
  /// kernelMaxBacklog()). A small backlog makes bursts of connects time out.
  int listen(const std::string& address, uint16_t port, int backlog = 0) noexcept;
  /// The kernel's limit on a listener's backlog (net.rdma_ucm.max_backlog); 1024 if unreadable.
  static int kernelMaxBacklog() noexcept;
  /// The port bound (useful after listening on port 0).
  uint16_t port() const noexcept;

  /// Stops listening (no more requests) and closes every agent. Agents report onClosed as usual.
  /// (If the device goes away, the listener stops by itself: onListenerError(-ENODEV), and
  /// listen() may be called again once it is back.)
  void close() noexcept;

  /// Graceful shutdown: stops listening (requests still waiting for their turn are rejected "the
  /// server is draining"), lets the agents go on, closes those still open after `grace` (0: at
  /// once), and calls `drained` from a later loop turn once the last agent has closed (also when
  /// there was none). Agents on workers count too. A second call only shortens the grace. The
  /// Listener stays until its Ptr is dropped (dropping it in `drained` is fine).
  void drain(std::chrono::milliseconds grace, std::function<void()> drained);
  bool draining() const noexcept;

  /// Agents now: this Listener's own and those on its workers.
  size_t agentCount() const noexcept;
  /// This Listener's own agents (not those on its workers), each once, in no particular order.
  /// `fn` may close() an agent (it goes on a later turn).
  void forEachAgent(const std::function<void(Agent&)>& fn) const;
  /// The next `most` of this Listener's own agents in a walk, then `walk` stands after them: a
  /// server that lists many thousands (a status page) takes a slice a loop turn instead of holding
  /// its loop for all of them at once. The order is fixed while the agents live: one present from
  /// the walk's first call to its last is visited exactly once; one that comes or goes in between
  /// at most once. Returns how many it visited; `walk.done` is set once none is left after them.
  /// `fn` may close() an agent (it goes on a later turn).
  size_t forEachAgentFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const;
  /// This Listener's own agents by state. Kept by the agents as their states move: answered
  /// without a walk over them, however many there are.
  ConnectionCounts agentsByState() const noexcept;
  /// The ConnectionStats of every agent this Listener's Reactor has had, the closed ones included,
  /// summed: messages and bytes each way, credit waits, keepalive probes... Each agent adds to
  /// these as it counts: answered without a walk over them.
  ConnectionStats agentTotals() const noexcept;
  /// Per worker (ListenerOptions::workers), in order; empty without workers. Thread-safe.
  std::vector<WorkerFigures> workerFigures() const;
  const ListenerStats& stats() const noexcept;
  /// Memory pinned now for this Listener's own agents not yet established (and for the request
  /// whose buffers are being populated): what maxUnestablishedMemory bounds.
  uint64_t unestablishedMemory() const noexcept;
  /// An agent's large buffers are populated (their pages faulted in) before they are registered,
  /// at most this much per loop turn: registering fresh pages would fault them all in at once.
  static constexpr uint64_t kPopulatePerTurn = 4u << 20;
  Reactor& reactor() const noexcept;

 private:
  Listener(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options);
  ~Listener();
  std::unique_ptr<ListenerCore> core_;  ///< what it holds behind this API (not installed)
};

}  // namespace evrdma
