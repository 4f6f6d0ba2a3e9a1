// ListenerCore: listening, the answer to each connect request (limits, the factory, the waiting
// line), admitting it here or handing it to a worker, close and drain, and its figures.
#include "ListenerCore.h"

#include <netinet/in.h>

#include "AgentHome.h"
#include "CmDispatcher.h"
#include "CmEvent.h"
#include "ConnectRequests.h"
#include "Drain.h"
#include "Logging.h"
#include "ReactorCore.h"
#include "ReactorMember.h"
#include "WaitingLine.h"
#include "WorkerPool.h"
#include "evrdma/Address.h"
#include "evrdma/Reactor.h"

namespace evrdma {

ListenerCore::ListenerCore(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options)
    : reactor_(reactor),
      factory_(factory),
      options_(options),
      waiting_(std::make_unique<detail::WaitingLine>()),
      home_(std::make_unique<detail::AgentHome>(
          reactor, options, stats_, nullptr, [this] { serveLines(); }, [this] { drain_->maybeDone(); })),
      workers_(std::make_unique<detail::WorkerPool>(options.workers)),
      drain_(std::make_unique<detail::Drain>(
          reactor, [this] { return agentCount(); }, [this] { closeAgents(); }, [this] { return !workers_->empty(); })) {
  coreOf(reactor).join(this);
  options_.workers.clear();  // what the workers' sides are made with
}

void ListenerCore::release(std::function<void()> deleteListener) noexcept {
  id_.reset();  // no more requests to hand over
  workers_->releaseSides();  // each closes its agents and goes, on its thread
  if (orphaned_) {  // the Reactor is gone, and the agents with it
    deleteListener();
    return;
  }
  deleteListener_ = std::move(deleteListener);
  close();
  home_->deleteOwnerWhenEmpty(deleteListener_);
}

ListenerCore::~ListenerCore() {
  if (!orphaned_) coreOf(reactor_).leave(this);
}

size_t ListenerCore::agentCount() const noexcept {
  // Accepted requests not set up yet count too (a worker counts those handed to it already).
  return home_->agents().size() + home_->admittedCount() + workers_->agents();
}

std::vector<WorkerFigures> ListenerCore::workerFigures() const { return workers_->figures(); }

void ListenerCore::onReactorGone() noexcept {
  // Silent, like the Reactor's other members: the agents close without callbacks.
  orphaned_ = true;
  drain_->forget();
  waiting_->destroyIds();
  id_.reset();
  home_->forget();
  if (deleteListener_) {  // released already: this goes with it
    std::function<void()> deleteListener = std::move(deleteListener_);
    deleteListener();
  }
}

int ListenerCore::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  if (orphaned_) return -ESHUTDOWN;
  if (id_) return -EALREADY;
  if (!workers_->allAcceptPosts()) return -EINVAL;  // nothing could be handed to them
  sockaddr_storage local{};
  if (int rc = parseAddress(address, port, local); rc != 0) return rc;
  int error = 0;
  CmDispatcher* cm = coreOf(reactor_).cm(error);
  if (cm == nullptr) return error;
  // Port 0: the RDMA CM picks a port that is free in its own port space. On iWARP the listen is a
  // TCP listen too, and a TCP socket of this machine (a client's, say) may hold the port picked:
  // rdma_listen says EADDRINUSE. Another pick then; a port the caller named is its own to fix.
  constexpr int kPortPicks = 16;
  int rc = 0;
  for (int pick = 0; pick < kPortPicks; ++pick) {
    rc = bindAndListen(*cm, local, backlog);
    if (rc != -EADDRINUSE || port != 0) return rc;
  }
  return rc;
}

int ListenerCore::bindAndListen(CmDispatcher& cm, sockaddr_storage& local, int backlog) noexcept {
  CmId id;
  if (int rc = cm.createId(this, RDMA_PS_TCP, id); rc != 0) return rc;
  int on = 1;
  if (options_.reuseAddress &&
      rdma_set_option(id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) != 0)
    return errno ? -errno : -EINVAL;
  if (options_.ipv6Only && local.ss_family == AF_INET6 &&
      rdma_set_option(id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof on) != 0)
    return errno ? -errno : -EINVAL;
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

uint16_t ListenerCore::port() const noexcept { return id_ ? ntohs(rdma_get_src_port(id_.get())) : 0; }

void ListenerCore::close() noexcept {
  stopListening("the server is shutting down");
  closeAgents();
}

void ListenerCore::stopListening(const char* reason) noexcept {
  id_.reset();  // no more connect requests
  CmEvent event;
  while (waiting_->popFront(event)) {
    ++stats_.rejectedClosing;
    home_->reject(event.id, reason);
  }
  home_->rejectAdmitted(reason);
}

void ListenerCore::closeAgents() noexcept {
  home_->agents().closeAll();
  workers_->closeAgents();
}

void ListenerCore::drain(std::chrono::milliseconds grace, std::function<void()> drained) {
  if (drain_->start(grace, std::move(drained))) stopListening("the server is draining");
  if (!orphaned_) drain_->tick();
}

bool ListenerCore::draining() const noexcept { return drain_->active(); }

void ListenerCore::forEachAgent(const std::function<void(Agent&)>& fn) const { home_->agents().forEach(fn); }

size_t ListenerCore::forEachAgentFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const {
  return home_->agents().forEachFrom(walk, most, fn);
}

ConnectionCounts ListenerCore::agentsByState() const noexcept { return home_->agents().byState(); }

ConnectionStats ListenerCore::agentTotals() const noexcept { return home_->agents().totals(); }

uint64_t ListenerCore::unestablishedMemory() const noexcept { return home_->unestablishedBytes(); }

void ListenerCore::onCmEvent(const CmEvent& event) noexcept {
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

void ListenerCore::onConnectRequest(const CmEvent& event) noexcept {
  ++stats_.requests;
  if (coreOf(reactor_).lingering()) {  // ~Reactor: streams finish sending, nothing new starts
    ++stats_.rejectedClosing;
    home_->reject(event.id, "the server is shutting down");
    return;
  }
  // (Admitted requests that wait for memory do not hold it back: it may fit where they do not.)
  if (waiting_->empty() && home_->mayAnswer()) {
    home_->countAnswer();
    answer(event);
    return;
  }
  const size_t waiting = waiting_->size() + home_->admittedCount();
  if (waiting >= options_.maxWaitingRequests) {
    ++stats_.rejectedWaiting;
    home_->reject(event.id, "server busy: " + std::to_string(waiting) + " requests waiting to be accepted");
    return;
  }
  ++stats_.heldForLaterTurn;
  waiting_->push(event);
}

void ListenerCore::serveLines() noexcept {
  // The admitted requests are set up first, then the waiting ones answered. When every admitted
  // one waits for memory, waiting requests are answered all the same: smaller ones may fit. The
  // factory or a handler may close or release the listener meanwhile: its lines are then empty.
  while (home_->mayAnswer()) {
    const detail::AgentHome::Served served = home_->serveAdmitted(true);
    if (served == detail::AgentHome::Served::One) continue;
    if (served == detail::AgentHome::Served::NextTurn) return;  // buffers being populated
    CmEvent event;
    if (!waiting_->popFront(event)) return;
    home_->countAnswer();
    answer(event);
  }
  // This turn's count is spent (countAnswer armed the next turn).
}

bool ListenerCore::onWaitingRequestEvent(const CmEvent& event) noexcept {
  if (waiting_->take(event.id)) {
    // Its client went away before its turn came (REJECTED, DISCONNECTED...): nobody to answer.
    home_->forgetAbandonedRequest(event.id);
    return true;
  }
  return home_->forgetAdmitted(event.id);  // accepted by the factory, not set up yet
}

void ListenerCore::answer(const CmEvent& event) noexcept {
  if (!id_) {  // closing: a request that was already queued
    ++stats_.rejectedClosing;
    home_->reject(event.id, draining() ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!detail::requestStillWaiting(event.id)) {
    // It waited in the backlog longer than the client's connect timeout: nobody to answer.
    home_->forgetAbandonedRequest(event.id);
    return;
  }
  if (options_.maxAgents != 0 && agentCount() >= options_.maxAgents) {
    ++stats_.rejectedBusy;
    home_->reject(event.id, "server busy: " + std::to_string(agentCount()) + " agents (maxAgents)");
    return;
  }
  ConnectRequest request{formatAddress(rdma_get_peer_addr(event.id)), event.privateData, event.initiatorDepth,
                         event.responderResources};
  AcceptDecision decision = factory_.onConnectRequest(request);
  if (!id_) {  // the factory closed the listener (or dropped its Ptr) while deciding
    ++stats_.rejectedClosing;
    home_->reject(event.id, draining() ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!decision.handler) {
    ++stats_.rejectedByFactory;
    home_->reject(event.id, decision.rejectReason.empty() ? "rejected" : decision.rejectReason);
    return;
  }
  if (workers_->empty()) {
    home_->admit(event.id, std::move(decision), false, true);
    return;
  }
  ++stats_.accepted;  // handed over; the worker's figures say how it went there
  workers_->handOver(event.id, std::move(decision), options_);
}

}  // namespace evrdma
