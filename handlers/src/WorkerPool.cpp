// WorkerPool: choosing a worker for each accepted request and handing it over, the workers'
// figures, their sides' end.
#include "WorkerPool.h"

#include "CmDispatcher.h"

#include "evrdma/Reactor.h"

namespace evrdma::detail {

WorkerPool::WorkerPool(const std::vector<Reactor*>& reactors) {
  for (Reactor* reactor : reactors) workers_.push_back(std::make_shared<ListenerWorker>(reactor));
}

bool WorkerPool::allAcceptPosts() const noexcept {
  for (const std::shared_ptr<ListenerWorker>& worker : workers_)
    if (!worker->reactor->acceptsPosts()) return false;
  return true;
}

size_t WorkerPool::agents() const noexcept {
  size_t count = 0;
  for (const std::shared_ptr<ListenerWorker>& worker : workers_) count += worker->agents.load();
  return count;
}

std::vector<WorkerFigures> WorkerPool::figures() const {
  std::vector<WorkerFigures> figures;
  for (const std::shared_ptr<ListenerWorker>& worker : workers_) {
    WorkerFigures f;
    f.agents = worker->agents.load();
    f.accepted = worker->accepted.load();
    f.rejected = worker->rejected.load();
    f.abandoned = worker->abandoned.load();
    f.closed = worker->closed.load();
    f.heldForLaterTurn = worker->heldForLaterTurn.load();
    f.mostInOneTurn = worker->mostInOneTurn.load();
    f.heldForMemory = worker->heldForMemory.load();
    figures.push_back(f);
  }
  return figures;
}

std::shared_ptr<ListenerWorker> WorkerPool::pick() noexcept {
  const size_t count = workers_.size();
  size_t best = next_ % count;
  for (size_t k = 1; k < count; ++k) {
    const size_t i = (next_ + k) % count;
    if (workers_[i]->agents.load() < workers_[best]->agents.load()) best = i;
  }
  next_ = best + 1;
  ++workers_[best]->agents;  // counted from now: maxAgents sees it at once
  return workers_[best];
}

void WorkerPool::handOver(rdma_cm_id* id, AcceptDecision decision, const ListenerOptions& options) noexcept {
  std::shared_ptr<ListenerWorker> worker = pick();  // its agents count this one
  id->context = nullptr;  // an event of it read here before it moves is dropped, not ours
  (void)CmDispatcher::forgetWaitingEventsOf(id);  // nor dispatched here, if read ahead already
  auto handed = std::make_shared<AcceptDecision>(std::move(decision));
  (void)worker->reactor->post([worker, id, handed, options] {  // listen() checked it accepts posts
    if (!worker->side) worker->side = WorkerSide::create(worker, options);
    worker->side->takeHandedOver(id, std::move(*handed));
  });
}

void WorkerPool::closeAgents() noexcept {
  for (const std::shared_ptr<ListenerWorker>& worker : workers_)
    (void)worker->reactor->post([worker] {
      if (worker->side) worker->side->close();
    });
}

void WorkerPool::releaseSides() noexcept {
  // From here on the Listener hands nothing over, so it no longer needs its workers.
  for (const std::shared_ptr<ListenerWorker>& worker : workers_)
    (void)worker->reactor->post([worker] { WorkerSide::Ptr side = std::move(worker->side); });  // accepts posts (listen)
  workers_.clear();
}

}  // namespace evrdma::detail
