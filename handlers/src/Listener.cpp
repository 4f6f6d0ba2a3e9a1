// Listener: listening, admission (limits, the waiting line, memory), hand-over to workers, drain,
// and its figures.
#include "evrdma/Listener.h"

#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "AdmittedLine.h"
#include "AgentSet.h"
#include "CmDispatcher.h"
#include "CmEvent.h"
#include "ConnectRequests.h"
#include "Drain.h"
#include "Logging.h"
#include "PreparedMappings.h"
#include "ReactorCore.h"
#include "ReactorMember.h"
#include "WaitingLine.h"
#include "WorkerPool.h"
#include "evrdma/Address.h"
#include "evrdma/PrivateData.h"
#include "evrdma/Reactor.h"

namespace evrdma {

class Listener::Sink final : public CmEventHandler, public detail::ReactorMember {
 public:
  explicit Sink(Listener& listener) : listener_(listener) {}
  void onCmEvent(const CmEvent& event) noexcept override { listener_.onCmEvent(event); }
  void onReactorGone() noexcept override { listener_.onReactorGone(); }  // may free the listener

 private:
  Listener& listener_;
};

Listener::Listener(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options)
    : reactor_(reactor),
      factory_(factory),
      options_(options),
      sink_(std::make_unique<Sink>(*this)),
      agents_(std::make_unique<detail::AgentSet>()),
      waiting_(std::make_unique<detail::WaitingLine>(reactor, options.acceptsPerTurn,
                                                     [this] {
                                                       admitted_->startTurn();
                                                       serveLines();
                                                     })),
      admitted_(std::make_unique<detail::AdmittedLine>(stats_)),
      workers_(std::make_unique<detail::WorkerPool>(options.workers)),
      drain_(std::make_unique<detail::Drain>(
          reactor, [this] { return agentCount(); }, [this] { closeAgents(); }, [this] { return !workers_->empty(); })) {
  reactor.core().join(sink_.get());
  options_.workers.clear();  // what the workers' sides are made with
}

void Listener::Release::operator()(Listener* listener) const noexcept {
  listener->id_.reset();  // no more requests to hand over
  listener->workers_->releaseSides();  // each closes its agents and goes, on its thread
  if (listener->orphaned_) {  // the Reactor is gone, and the agents with it
    delete listener;
    return;
  }
  listener->released_ = true;
  listener->close();
  listener->maybeDelete();
}

Listener::Ptr Listener::create(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options) {
  return Ptr(new Listener(reactor, factory, options));
}

Listener::~Listener() {
  if (!orphaned_) reactor_.core().leave(sink_.get());
}

size_t Listener::agentCount() const noexcept {
  // Accepted requests not set up yet count too (a worker counts those handed to it already).
  return agents_->size() + (servesWorker_ ? 0 : admitted_->size()) + workers_->agents();
}

std::vector<WorkerFigures> Listener::workerFigures() const { return workers_->figures(); }

void Listener::onReactorGone() noexcept {
  // Silent, like the Reactor's other members: the agents close without callbacks.
  orphaned_ = true;
  drain_->forget();
  waiting_->destroyIds();
  admitted_->destroyIds();
  waiting_->stop();
  id_.reset();
  agents_->clear();
  if (released_) delete this;
}

int Listener::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  if (orphaned_) return -ESHUTDOWN;
  if (id_) return -EALREADY;
  if (!workers_->allAcceptPosts()) return -EINVAL;  // nothing could be handed to them
  sockaddr_storage local{};
  if (int rc = parseAddress(address, port, local); rc != 0) return rc;
  int error = 0;
  CmDispatcher* cm = reactor_.core().cm(error);
  if (cm == nullptr) return error;
  CmId id;
  if (int rc = cm->createId(sink_.get(), RDMA_PS_TCP, id); rc != 0) return rc;
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&local)) != 0) return errno ? -errno : -EINVAL;
  // An address of this machine that no RDMA device serves (its netdev has none, or its device is
  // gone) binds all the same, and such a listener would never hear a request: refused instead. A
  // wildcard address takes every device, present and to come.
  if (id->verbs == nullptr && !detail::isWildcard(local)) return -ENODEV;
  // The kernel takes 0 (and anything over its limit) as its limit.
  if (rdma_listen(id.get(), backlog < 0 ? 0 : backlog) != 0) return errno ? -errno : -EINVAL;
  id_ = std::move(id);
  return 0;
}

int Listener::kernelMaxBacklog() noexcept { return detail::readKernelMaxBacklog(); }

uint16_t Listener::port() const noexcept { return id_ ? ntohs(rdma_get_src_port(id_.get())) : 0; }

void Listener::close() noexcept {
  id_.reset();  // no more connect requests
  rejectWaiting("the server is shutting down");
  rejectAdmitted("the server is shutting down");
  closeAgents();
}

void Listener::rejectAdmitted(const char* reason) noexcept {
  // Accepted, not set up yet: the client is told no, the handler the factory made hears onClosed.
  detail::AdmittedLine::Request admitted;
  while (admitted_->takeFront(admitted)) {
    ++stats_.rejectedClosing;
    if (servesWorker_) ++servesWorker_->rejected;
    reject(admitted.id, reason);
    endUnaccepted(std::move(admitted.decision), 0, nullptr);
  }
}

void Listener::rejectWaiting(const char* reason) noexcept {
  CmEvent event;
  while (waiting_->popFront(event)) {
    ++stats_.rejectedClosing;
    reject(event.id, reason);
  }
}

void Listener::closeAgents() noexcept {
  agents_->closeAll();
  workers_->closeAgents();
}

void Listener::drain(std::chrono::milliseconds grace, std::function<void()> drained) {
  if (drain_->start(grace, std::move(drained))) {
    id_.reset();  // no more requests
    rejectWaiting("the server is draining");
    rejectAdmitted("the server is draining");
  }
  if (!orphaned_) drain_->tick();
}

bool Listener::draining() const noexcept { return drain_->active(); }

void Listener::forEachAgent(const std::function<void(Agent&)>& fn) const { agents_->forEach(fn); }

ConnectionCounts Listener::agentsByState() const noexcept { return agents_->byState(); }

ConnectionStats Listener::agentTotals() const noexcept { return agents_->totals(); }

void Listener::onCmEvent(const CmEvent& event) noexcept {
  if (event.type != RDMA_CM_EVENT_CONNECT_REQUEST && onWaitingRequestEvent(event)) return;
  switch (event.type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      onConnectRequest(event);
      return;
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return;  // informational
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      // The ids must go for the removal to complete; listen() again once the device is back.
      id_.reset();
      waiting_->destroyIds();
      EVRDMA_LOG(LogLevel::Error, "a listener's device is being removed: it stopped listening");
      factory_.onListenerError(-ENODEV, "device removal: the listener stopped (listen again once the device is back)");
      return;
    default:
      factory_.onListenerError(-EPROTO, "unexpected CM event on the listening id");
  }
}

void Listener::onConnectRequest(const CmEvent& event) noexcept {
  ++stats_.requests;
  // (Admitted requests that wait for memory do not hold it back: it may fit where they do not.)
  if (waiting_->empty() && waiting_->mayAnswer()) {
    countAnswerThisTurn();
    answer(event);
    return;
  }
  if (waiting_->size() + admitted_->size() >= options_.maxWaitingRequests) {
    ++stats_.rejectedWaiting;
    reject(event.id, "server busy: " + std::to_string(waiting_->size() + admitted_->size()) +
                         " requests waiting to be accepted");
    return;
  }
  ++stats_.heldForLaterTurn;
  waiting_->push(event);
}

void Listener::countAnswerThisTurn() noexcept {
  const uint32_t answered = waiting_->countAnswer();
  if (servesWorker_ && answered > servesWorker_->mostInOneTurn.load()) servesWorker_->mostInOneTurn = answered;
}

void Listener::serveLines() noexcept {
  // A listening Listener answers the requests that waited; either side sets up the admitted ones
  // (a worker's side: those handed over), which go first. When every admitted one waits for
  // memory, waiting requests are answered all the same: smaller ones may fit. The factory or a
  // handler may close or release the listener meanwhile: its lines are then empty.
  while (waiting_->mayAnswer()) {
    if (!admitted_->empty()) {
      bool nextTurn = false;
      if (stepAdmitted(true, nextTurn)) continue;
      if (nextTurn) {
        waiting_->armNextTurn();
        return;
      }
      // All wait for memory: until an agent is established or ends (releaseUnestablished).
    }
    CmEvent event;
    if (!waiting_->popFront(event)) return;
    countAnswerThisTurn();
    answer(event);
  }
  // This turn's count is spent (countAnswerThisTurn armed the next turn).
}

uint64_t Listener::maxUnestablished() const noexcept {
  if (options_.maxUnestablishedMemory != 0) return options_.maxUnestablishedMemory;
  const uint64_t budget = reactor_.memoryBudget();
  return budget != 0 ? std::max<uint64_t>(budget / 4, 1) : uint64_t{256} << 20;
}

uint64_t Listener::unestablishedMemory() const noexcept { return admitted_->unestablishedBytes(); }

void Listener::admit(rdma_cm_id* id, AcceptDecision decision, bool handedOver, bool thisTurn) noexcept {
  admitted_->push(id, std::move(decision), handedOver);
  if (!thisTurn) return;
  // Its answer was counted already (answer() or takeHandedOver()). It goes now unless older ones
  // go first, or it waits for memory.
  bool nextTurn = false;
  if (!stepAdmitted(false, nextTurn) && nextTurn) waiting_->armNextTurn();
}

bool Listener::stepAdmitted(bool countAnswer, bool& nextTurn) noexcept {
  detail::AdmittedLine::Request ready;
  const detail::AdmittedLine::Step step = admitted_->step(maxUnestablished(), kPopulatePerTurn, ready);
  nextTurn = step == detail::AdmittedLine::Step::NextTurn;
  if (step != detail::AdmittedLine::Step::Ready) return false;
  if (countAnswer) countAnswerThisTurn();
  if (ready.handedOver)
    adopt(ready.id, std::move(ready.decision), std::move(ready.prepared), ready.bytes);
  else
    setUpAgent(ready.id, std::move(ready.decision), std::move(ready.prepared), ready.bytes);
  return true;
}

void Listener::releaseUnestablished(Agent* agent) noexcept {
  const uint64_t bytes = agent->unestablishedBytes_;
  agent->unestablishedBytes_ = 0;
  giveBackUnestablished(bytes);
}

void Listener::giveBackUnestablished(uint64_t bytes) noexcept {
  if (admitted_->giveBack(bytes)) waiting_->armNextTurn();  // one that waited for memory may fit now
}

void Listener::takeHandedOver(rdma_cm_id* id, AcceptDecision decision) noexcept {
  // Paced as the listening side paces its requests: a storm handed over in one batch of posts
  // would otherwise be set up in one turn of the worker's loop, its connected peers waiting.
  if (waiting_->mayAnswer()) {
    countAnswerThisTurn();
    admit(id, std::move(decision), true, true);
    return;
  }
  ++servesWorker_->heldForLaterTurn;
  admit(id, std::move(decision), true, false);
  waiting_->armNextTurn();
}

bool Listener::onWaitingRequestEvent(const CmEvent& event) noexcept {
  if (waiting_->take(event.id)) {
    // Its client went away before its turn came (REJECTED, DISCONNECTED...): nobody to answer.
    forgetAbandonedRequest(event.id);
    return true;
  }
  // Accepted by the factory, not set up yet (a handed-over id's events no longer come here).
  detail::AdmittedLine::Request admitted;
  if (!admitted_->take(event.id, admitted)) return false;
  if (admitted.begun && !admitted_->empty()) waiting_->armNextTurn();  // one that waited for memory may fit now
  forgetAbandonedRequest(event.id);
  endUnaccepted(std::move(admitted.decision), 0, nullptr);
  return true;
}

void Listener::answer(const CmEvent& event) noexcept {
  if (!id_) {  // closing: a request that was already queued
    ++stats_.rejectedClosing;
    reject(event.id, draining() ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!detail::requestStillWaiting(event.id)) {
    // It waited in the backlog longer than the client's connect timeout: nobody to answer.
    forgetAbandonedRequest(event.id);
    return;
  }
  if (options_.maxAgents != 0 && agentCount() >= options_.maxAgents) {
    ++stats_.rejectedBusy;
    reject(event.id, "server busy: " + std::to_string(agentCount()) + " agents (maxAgents)");
    return;
  }
  ConnectRequest request{formatAddress(rdma_get_peer_addr(event.id)), event.privateData, event.initiatorDepth,
                         event.responderResources};
  AcceptDecision decision = factory_.onConnectRequest(request);
  if (!id_) {  // the factory closed the listener (or dropped its Ptr) while deciding
    ++stats_.rejectedClosing;
    reject(event.id, draining() ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!decision.handler) {
    ++stats_.rejectedByFactory;
    reject(event.id, decision.rejectReason.empty() ? "rejected" : decision.rejectReason);
    return;
  }
  if (!workers_->empty())
    handOver(event.id, std::move(decision));
  else
    admit(event.id, std::move(decision), false, true);
}

void Listener::setUpAgent(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<detail::PreparedMappings> prepared,
                          uint64_t bytes) noexcept {
  Agent* agent = agents_->add(std::unique_ptr<Agent>(
      new Agent(*this, reactor_, std::move(decision.handler), decision.options, options_.acceptTimeout)));
  agent->unestablishedBytes_ = bytes;  // given back once it is established or ends
  const char* op = nullptr;
  if (int rc = agent->accept(CmId(id), decision.privateData, op, prepared.get()); rc != 0) {
    // The client gave up meanwhile: that, not `op`, failed. (On iWARP its TCP connection is gone:
    // the accept's MPA reply meets a reset.)
    if (rc == -ECONNRESET || !detail::requestStillWaiting(agent->cmId())) {
      agentAbandoned(agent);
      return;
    }
    // Tell the client why, then let the handler the factory made hear it too: onError, onClosed.
    std::string reason = std::string("server could not set up the connection: ") + op + ": " + strerror(-rc);
    auto payload = encodeRejectReason(reason);
    rdma_reject(agent->cmId(), payload.data(), static_cast<uint8_t>(payload.size()));
    ++stats_.rejected;
    ++stats_.rejectedSetup;
    if (servesWorker_) ++servesWorker_->rejected;
    agent->fail(rc, op);
    return;
  }
  ++stats_.accepted;
  if (servesWorker_) ++servesWorker_->accepted;
}

void Listener::handOver(rdma_cm_id* id, AcceptDecision decision) noexcept {
  std::shared_ptr<detail::ListenerWorker> worker = workers_->pick();  // its agents count this one
  ++stats_.accepted;  // handed over; the worker's figures say how it went there
  id->context = nullptr;  // an event of it read here before it moves is dropped, not ours
  auto handed = std::make_shared<AcceptDecision>(std::move(decision));
  AgentFactory* factory = &factory_;
  ListenerOptions sideOptions = options_;
  (void)worker->reactor->post([worker, id, handed, factory, sideOptions] {  // listen() checked it accepts posts
    if (!worker->side) {
      worker->side = Listener::create(*worker->reactor, *factory, sideOptions);
      worker->side->servesWorker_ = worker;
      worker->side->admitted_->alsoCountHeldIn(&worker->heldForMemory);
    }
    worker->side->takeHandedOver(id, std::move(*handed));
  });
}

void Listener::adopt(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<detail::PreparedMappings> prepared,
                     uint64_t bytes) noexcept {
  int error = 0;
  CmDispatcher* cm = reactor_.core().cm(error);
  // Its CM events come to this Reactor from now on. (librdmacm waits, if need be, until the
  // listening Reactor has acked those it read already: it acks before dispatching.)
  if (cm != nullptr && rdma_migrate_id(id, cm->channel()) != 0) error = errno ? -errno : -EINVAL;
  if (error != 0) {
    giveBackUnestablished(bytes);  // no agent will hold them
    const std::string why = std::string("server could not set up the connection: rdma_migrate_id: ") + strerror(-error);
    reject(id, why);
    ++stats_.rejectedSetup;
    ++servesWorker_->rejected;
    endUnaccepted(std::move(decision), error, why.c_str());
    return;
  }
  if (!detail::requestStillWaiting(id)) {
    giveBackUnestablished(bytes);
    forgetAbandonedRequest(id);
    ++servesWorker_->abandoned;
    endUnaccepted(std::move(decision), 0, nullptr);
    return;
  }
  setUpAgent(id, std::move(decision), std::move(prepared), bytes);
}

void Listener::endUnaccepted(AcceptDecision decision, int err, const char* op) noexcept {
  // The factory made a handler for a request that will never be a connection (on the listening
  // thread, before the hand-over): it still hears how it ended, onError if it failed, then
  // onClosed, from an agent that never had an id. Its end counts it out of the worker's agents.
  Agent* agent = agents_->add(std::unique_ptr<Agent>(
      new Agent(*this, reactor_, std::move(decision.handler), decision.options, options_.acceptTimeout)));
  if (err != 0)
    agent->fail(err, op);
  else
    agent->close();
}

void Listener::reject(rdma_cm_id* id, const std::string& reason) noexcept {
  detail::rejectRequest(id, reason);
  ++stats_.rejected;
}

void Listener::forgetAbandonedRequest(rdma_cm_id* id) noexcept {
  ++stats_.abandoned;
  detail::forgetAbandonedRequest(id);
}

void Listener::agentAbandoned(Agent* agent) noexcept {
  ++stats_.abandoned;
  if (servesWorker_) ++servesWorker_->abandoned;
  agent->close();  // not a failure: onClosed only
}

void Listener::agentFinished(Agent* agent) noexcept {
  agents_->noteFinished(*agent, stats_);
  if (servesWorker_) {
    --servesWorker_->agents;
    ++servesWorker_->closed;
  }
  // Called from the agent's own finish(): free it on a later turn.
  reactor_.defer([this, agent] {
    agents_->erase(agent);
    drain_->maybeDone();
    maybeDelete();
  });
}

void Listener::maybeDelete() noexcept {
  if (!released_ || !agents_->empty() || deleteScheduled_) return;
  deleteScheduled_ = true;
  reactor_.defer([this] {
    if (agents_->empty()) {
      delete this;
    } else {
      deleteScheduled_ = false;  // an agent arrived meanwhile: its end deletes the listener
    }
  });
}

}  // namespace evrdma
