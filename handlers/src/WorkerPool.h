// WorkerPool: the worker Reactors of a listening Listener (ListenerOptions::workers), each with its
// figures and its side (a WorkerSide on the worker's thread, owning the agents handed to it): which
// worker takes the next request, handing it over, and letting go of their sides.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "WorkerSide.h"
#include "evrdma/Listener.h"

namespace evrdma::detail {

// Shared with the closures posted to the worker's thread; its figures are read from any thread.
struct ListenerWorker {
  explicit ListenerWorker(Reactor* on) : reactor(on) {}
  Reactor* reactor;
  std::atomic<size_t> agents{0};
  std::atomic<uint64_t> accepted{0}, rejected{0}, abandoned{0}, closed{0};
  std::atomic<uint64_t> heldForLaterTurn{0}, heldForMemory{0};
  std::atomic<uint32_t> mostInOneTurn{0};
  WorkerSide::Ptr side;  // touched on the worker's thread only
};

class WorkerPool {
 public:
  explicit WorkerPool(const std::vector<Reactor*>& reactors);

  bool empty() const noexcept { return workers_.empty(); }
  // Each worker's Reactor accepts posts (Reactor::acceptsPosts): a request can be handed to it.
  bool allAcceptPosts() const noexcept;
  // Agents on the workers now (handed over, not yet closed).
  size_t agents() const noexcept;
  std::vector<WorkerFigures> figures() const;
  // The worker with the fewest agents; on a tie the next in turn, so a burst spreads before any
  // agent counts. Its agent count already includes the one handed to it.
  std::shared_ptr<ListenerWorker> pick() noexcept;
  // Hands an accepted request to the worker with the fewest agents (pick), whose side sets up its
  // agent with the Listener's `options`.
  void handOver(rdma_cm_id* id, AcceptDecision decision, const ListenerOptions& options) noexcept;
  // Each side closes its agents, on its thread.
  void closeAgents() noexcept;
  // Each side goes, on its thread, once it has closed its agents; the pool is empty after.
  void releaseSides() noexcept;

 private:
  std::vector<std::shared_ptr<ListenerWorker>> workers_;
  size_t next_ = 0;
};

}  // namespace evrdma::detail
