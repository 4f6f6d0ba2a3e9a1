// WorkerSide: handed-over requests set up on a worker's Reactor, paced, and the side's end.
#include "WorkerSide.h"

#include "ReactorCore.h"
#include "WorkerPool.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {

WorkerSide::WorkerSide(std::shared_ptr<ListenerWorker> worker, const ListenerOptions& options)
    : reactor_(*worker->reactor),
      worker_(worker),
      home_(*worker->reactor, options, stats_, worker, [this] { serveAdmitted(); }, [] {}) {
  coreOf(reactor_).join(this);
}

WorkerSide::~WorkerSide() {
  if (!orphaned_) coreOf(reactor_).leave(this);
}

WorkerSide::Ptr WorkerSide::create(std::shared_ptr<ListenerWorker> worker, const ListenerOptions& options) {
  return Ptr(new WorkerSide(std::move(worker), options));
}

void WorkerSide::Release::operator()(WorkerSide* side) const noexcept {
  if (side->orphaned_) {  // the Reactor is gone, and the agents with it
    delete side;
    return;
  }
  side->released_ = true;
  side->close();
  side->home_.deleteOwnerWhenEmpty([side] { delete side; });
}

void WorkerSide::onReactorGone() noexcept {
  // Silent, like the Reactor's other members: the agents close without callbacks.
  orphaned_ = true;
  home_.forget();
  if (released_) delete this;
}

void WorkerSide::takeHandedOver(rdma_cm_id* id, AcceptDecision decision) noexcept {
  // Paced as the listening side paces its requests: a storm handed over in one batch of posts
  // would otherwise be set up in one turn of the worker's loop, its connected peers waiting.
  if (home_.mayAnswer()) {
    home_.countAnswer();
    home_.admit(id, std::move(decision), true, true);
    return;
  }
  ++worker_->heldForLaterTurn;
  home_.admit(id, std::move(decision), true, false);
  home_.armNextTurn();
}

void WorkerSide::serveAdmitted() noexcept {
  // Until the turn's count is spent, buffers are being populated, or all wait for memory.
  while (home_.mayAnswer() && home_.serveAdmitted(true) == AgentHome::Served::One) {
  }
}

void WorkerSide::close() noexcept {
  home_.rejectAdmitted("the server is shutting down");
  home_.agents().closeAll();
}

}  // namespace evrdma::detail
