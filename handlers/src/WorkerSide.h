// WorkerSide: a Listener's part on one of its worker Reactors (ListenerOptions::workers), on that
// Reactor's thread: it takes the requests handed over, sets up their agents there as the listening
// side paces its own, owns them, and goes once released and its last agent is gone.
#pragma once

#include <rdma/rdma_cma.h>

#include <memory>

#include "AgentHome.h"
#include "ReactorMember.h"
#include "evrdma/Listener.h"

namespace evrdma::detail {

struct ListenerWorker;

class WorkerSide final : public ReactorMember {
 public:
  // Dropping a Ptr closes the agents and frees the side once the last has closed.
  struct Release {
    void operator()(WorkerSide* side) const noexcept;
  };
  using Ptr = std::unique_ptr<WorkerSide, Release>;

  // On the worker's thread; `options` are the Listener's.
  static Ptr create(std::shared_ptr<ListenerWorker> worker, const ListenerOptions& options);

  // A request the listening side accepted and handed here (its id still on that side's channel):
  // set up now, or on a later turn past acceptsPerTurn.
  void takeHandedOver(rdma_cm_id* id, AcceptDecision decision) noexcept;
  // Rejects the requests not set up yet and closes the agents.
  void close() noexcept;

 private:
  WorkerSide(std::shared_ptr<ListenerWorker> worker, const ListenerOptions& options);
  ~WorkerSide();
  void onReactorGone() noexcept override;
  void serveAdmitted() noexcept;

  Reactor& reactor_;
  std::shared_ptr<ListenerWorker> worker_;
  ListenerStats stats_;  // what the worker's figures do not need; nobody reads it
  AgentHome home_;
  bool released_ = false;
  bool orphaned_ = false;  // the Reactor was destroyed first
};

}  // namespace evrdma::detail
