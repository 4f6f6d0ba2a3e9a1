// Listener: listening, admission (limits, the waiting line, memory), hand-over to workers, drain,
// and its figures.
#include "evrdma/Listener.h"

#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "CmDispatcher.h"
#include "CmEvent.h"
#include "Logging.h"
#include "PreparedMappings.h"
#include "QueuePair.h"
#include "ReactorMember.h"
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

struct Listener::Worker {
  explicit Worker(Reactor* on) : reactor(on) {}
  Reactor* reactor;
  std::atomic<size_t> agents{0};
  std::atomic<uint64_t> accepted{0}, rejected{0}, abandoned{0}, closed{0};
  std::atomic<uint64_t> heldForLaterTurn{0}, heldForMemory{0};
  std::atomic<uint32_t> mostInOneTurn{0};
  Listener::Ptr side;  // touched on the worker's thread only
};

Listener::Listener(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options)
    : reactor_(reactor), factory_(factory), options_(options), sink_(std::make_unique<Sink>(*this)) {
  reactor.join(sink_.get());
  for (Reactor* worker : options_.workers) workers_.push_back(std::make_shared<Worker>(worker));
  options_.workers.clear();  // what the workers' sides are made with
}

void Listener::Release::operator()(Listener* listener) const noexcept {
  listener->id_.reset();  // no more requests to hand over
  listener->releaseWorkerSides();
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
  if (!orphaned_) reactor_.leave(sink_.get());
}

void Listener::releaseWorkerSides() noexcept {
  // Each worker's side goes on its own thread: it closes its agents and frees itself after them.
  // From here on the Listener hands nothing over, so it no longer needs its workers.
  for (const std::shared_ptr<Worker>& worker : workers_)
    (void)worker->reactor->post([worker] { Listener::Ptr side = std::move(worker->side); });  // accepts posts (listen)
  workers_.clear();
}

size_t Listener::agentCount() const noexcept {
  // Accepted requests not set up yet count too (a worker counts those handed to it already).
  size_t count = agents_.size() + (servesWorker_ ? 0 : admitted_.size());
  for (const std::shared_ptr<Worker>& worker : workers_) count += worker->agents.load();
  return count;
}

std::vector<WorkerFigures> Listener::workerFigures() const {
  std::vector<WorkerFigures> figures;
  for (const std::shared_ptr<Worker>& worker : workers_) {
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

void Listener::onReactorGone() noexcept {
  // Silent, like the Reactor's other members: the agents close without callbacks.
  orphaned_ = true;
  drainTimer_.reset();
  drained_ = nullptr;
  dropWaitingRequests();
  for (Admitted& admitted : admitted_) rdma_destroy_id(admitted.id);  // its event is acked already
  admitted_.clear();
  nextTurn_.reset();
  id_.reset();
  agents_.clear();
  if (released_) delete this;
}

namespace {
bool isWildcard(const sockaddr_storage& address) noexcept {
  if (address.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr == htonl(INADDR_ANY);
  if (address.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  return false;
}
}  // namespace

int Listener::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  if (orphaned_) return -ESHUTDOWN;
  if (id_) return -EALREADY;
  for (const std::shared_ptr<Worker>& worker : workers_)
    if (!worker->reactor->acceptsPosts()) return -EINVAL;  // nothing could be handed to it
  sockaddr_storage local{};
  if (int rc = parseAddress(address, port, local); rc != 0) return rc;
  int error = 0;
  CmDispatcher* cm = reactor_.cm(error);
  if (cm == nullptr) return error;
  CmId id;
  if (int rc = cm->createId(sink_.get(), RDMA_PS_TCP, id); rc != 0) return rc;
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&local)) != 0) return errno ? -errno : -EINVAL;
  // An address of this machine that no RDMA device serves (its netdev has none, or its device is
  // gone) binds all the same, and such a listener would never hear a request: refused instead. A
  // wildcard address takes every device, present and to come.
  if (id->verbs == nullptr && !isWildcard(local)) return -ENODEV;
  // The kernel takes 0 (and anything over its limit) as its limit.
  if (rdma_listen(id.get(), backlog < 0 ? 0 : backlog) != 0) return errno ? -errno : -EINVAL;
  id_ = std::move(id);
  return 0;
}

int Listener::kernelMaxBacklog() noexcept {
  int value = 1024;  // the kernel's default
  if (FILE* f = std::fopen("/proc/sys/net/rdma_ucm/max_backlog", "re")) {
    if (std::fscanf(f, "%d", &value) != 1 || value <= 0) value = 1024;
    std::fclose(f);
  }
  return value;
}

uint16_t Listener::port() const noexcept { return id_ ? ntohs(rdma_get_src_port(id_.get())) : 0; }

void Listener::close() noexcept {
  id_.reset();  // no more connect requests
  rejectWaiting("the server is shutting down");
  rejectAdmitted("the server is shutting down");
  closeAgents();
}

void Listener::rejectAdmitted(const char* reason) noexcept {
  // Accepted, not set up yet: the client is told no, the handler the factory made hears onClosed.
  while (!admitted_.empty()) {
    Admitted admitted = std::move(admitted_.front());
    admitted_.pop_front();
    if (admitted.begun) giveBackUnestablished(admitted.bytes);
    ++stats_.rejectedClosing;
    if (servesWorker_) ++servesWorker_->rejected;
    reject(admitted.id, reason);
    endUnaccepted(std::move(admitted.decision), 0, nullptr);
  }
}

void Listener::rejectWaiting(const char* reason) noexcept {
  while (!waiting_.empty()) {
    CmEvent event = std::move(waiting_.front());
    waiting_.pop_front();
    ++stats_.rejectedClosing;
    reject(event.id, reason);
  }
}

void Listener::closeAgents() noexcept {
  for (auto& [agent, owned] : agents_) agent->close();
  for (const std::shared_ptr<Worker>& worker : workers_)
    (void)worker->reactor->post([worker] {
      if (worker->side) worker->side->close();
    });
}

void Listener::drain(std::chrono::milliseconds grace, std::function<void()> drained) {
  const auto deadline = std::chrono::steady_clock::now() + std::max(grace, std::chrono::milliseconds(0));
  if (!draining_) {
    draining_ = true;
    drainDeadline_ = deadline;
    id_.reset();  // no more requests
    rejectWaiting("the server is draining");
    rejectAdmitted("the server is draining");
  } else if (deadline < drainDeadline_) {
    drainDeadline_ = deadline;
  }
  if (drained) drained_ = std::move(drained);
  if (orphaned_) return;
  if (!drainTimer_) drainTimer_ = std::make_unique<Timer>(reactor_, [this] { drainTick(); });
  drainTick();
}

void Listener::drainTick() noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (!drainClosedAgents_ && now >= drainDeadline_) {
    drainClosedAgents_ = true;
    closeAgents();
  }
  maybeDrained();
  if (!drained_) return;
  // The workers' agents close on their threads: their count is looked at every few milliseconds.
  auto next = std::chrono::milliseconds(10);
  if (workers_.empty()) {
    if (drainClosedAgents_) return;  // the last agent's end calls maybeDrained
    next = std::chrono::duration_cast<std::chrono::milliseconds>(drainDeadline_ - now) + std::chrono::milliseconds(1);
  }
  drainTimer_->startOnce(next);
}

void Listener::maybeDrained() noexcept {
  if (!draining_ || !drained_ || agentCount() != 0) return;
  std::function<void()> drained = std::move(drained_);
  drained_ = nullptr;
  if (drainTimer_) drainTimer_->cancel();
  reactor_.defer(std::move(drained));
}

void Listener::forEachAgent(const std::function<void(Agent&)>& fn) const {
  for (const auto& [agent, owned] : agents_) fn(*agent);
}

ConnectionCounts Listener::agentsByState() const noexcept {
  ConnectionCounts counts;
  for (const auto& [agent, owned] : agents_) ++counts[agent->state()];
  return counts;
}

ConnectionStats Listener::agentTotals() const noexcept {
  ConnectionStats totals = closedTotals_;
  for (const auto& [agent, owned] : agents_)
    if (agent->state() != ConnectionState::Closed && agent->state() != ConnectionState::Failed)
      totals += agent->stats();  // a finished agent's are in closedTotals_ already
  return totals;
}

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
      dropWaitingRequests();
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
  if (waiting_.empty() && (options_.acceptsPerTurn == 0 || answeredThisTurn_ < options_.acceptsPerTurn)) {
    countAnswerThisTurn();
    answer(event);
    return;
  }
  if (waiting_.size() + admitted_.size() >= options_.maxWaitingRequests) {
    ++stats_.rejectedWaiting;
    reject(event.id, "server busy: " + std::to_string(waiting_.size() + admitted_.size()) +
                         " requests waiting to be accepted");
    return;
  }
  ++stats_.heldForLaterTurn;
  waiting_.push_back(event);
}

void Listener::countAnswerThisTurn() noexcept {
  ++answeredThisTurn_;
  if (servesWorker_ && answeredThisTurn_ > servesWorker_->mostInOneTurn.load()) servesWorker_->mostInOneTurn = answeredThisTurn_;
  armNextTurn();  // the count starts over then
}

void Listener::armNextTurn() noexcept {
  if (!nextTurn_) nextTurn_ = std::make_unique<Timer>(reactor_, [this] { onNextTurn(); });
  if (!nextTurn_->active()) nextTurn_->startOnce(std::chrono::milliseconds(0));
}

void Listener::onNextTurn() noexcept {
  answeredThisTurn_ = 0;
  populatedThisTurn_ = 0;
  serveLines();
}

void Listener::serveLines() noexcept {
  // A listening Listener answers the requests that waited; either side sets up the admitted ones
  // (a worker's side: those handed over), which go first. When every admitted one waits for
  // memory, waiting requests are answered all the same: smaller ones may fit. The factory or a
  // handler may close or release the listener meanwhile: its lines are then empty.
  const uint32_t limit = options_.acceptsPerTurn;
  while (limit == 0 || answeredThisTurn_ < limit) {
    if (!admitted_.empty()) {
      const Step step = stepAdmitted(true);
      if (step == Step::SetUp) continue;
      if (step == Step::NextTurn) {
        armNextTurn();
        return;
      }
      // WaitsForMemory: until an agent is established or ends (releaseUnestablished).
    }
    if (waiting_.empty()) return;
    countAnswerThisTurn();
    CmEvent event = std::move(waiting_.front());
    waiting_.pop_front();
    answer(event);
  }
  // This turn's count is spent (countAnswerThisTurn armed the next turn).
}

uint64_t Listener::maxUnestablished() const noexcept {
  if (options_.maxUnestablishedMemory != 0) return options_.maxUnestablishedMemory;
  const uint64_t budget = reactor_.memoryBudget();
  return budget != 0 ? std::max<uint64_t>(budget / 4, 1) : uint64_t{256} << 20;
}

bool Listener::waitsForMemory(uint64_t bytes) const noexcept {
  // Large requests (over an eighth of the bound) share three quarters of it: the last quarter is
  // kept for small ones, which a few large requests whose clients never complete would otherwise
  // hold up until acceptTimeout. One request always goes when no other holds any: else one larger
  // than the bound never would.
  const uint64_t bound = maxUnestablished();
  const uint64_t limit = bytes > bound / 8 ? bound - bound / 4 : bound;
  return unestablishedBytes_ > 0 && bytes > limit - std::min(limit, unestablishedBytes_);
}

void Listener::admit(rdma_cm_id* id, AcceptDecision decision, bool handedOver, bool thisTurn) noexcept {
  Admitted admitted{id, std::move(decision), handedOver, false, false, 0, {}, nullptr};
  detail::QueuePair::MemoryNeeds needs = detail::QueuePair::memoryNeeds(admitted.decision.options);
  const uint64_t pool = admitted.decision.options.lendingPoolBytes;
  admitted.bytes = needs.pinned + (pool > 0 ? detail::BufferMemory::pinnedBytes(pool) : 0);
  admitted.ownRegions = std::move(needs.ownRegions);
  admitted_.push_back(std::move(admitted));
  if (!thisTurn) return;
  // Its answer was counted already (answer() or takeHandedOver()). It goes now unless older ones
  // go first, or it waits for memory.
  if (stepAdmitted(false) == Step::NextTurn) armNextTurn();
}

Listener::Step Listener::stepAdmitted(bool countAnswer) noexcept {
  // The one whose buffers are being populated goes on; else the oldest whose memory fits: one
  // that does not fit lets smaller ones behind it go first (a request for large buffers whose
  // client never completes must not hold up every other client until acceptTimeout).
  auto it = std::find_if(admitted_.begin(), admitted_.end(), [](const Admitted& a) { return a.begun; });
  if (it == admitted_.end()) {
    for (it = admitted_.begin(); it != admitted_.end() && waitsForMemory(it->bytes); ++it) {
      if (it->heldForMemory) continue;
      it->heldForMemory = true;
      ++stats_.heldForMemory;
      if (servesWorker_) ++servesWorker_->heldForMemory;
    }
    if (it == admitted_.end()) return Step::WaitsForMemory;
    it->begun = true;
    unestablishedBytes_ += it->bytes;
    stats_.mostUnestablishedMemory = std::max(stats_.mostUnestablishedMemory, unestablishedBytes_);
    uint64_t large = 0;
    for (size_t bytes : it->ownRegions) large += bytes;
    if (large > kPopulatePerTurn) {
      it->prepared = std::make_unique<detail::PreparedMappings>();
      if (it->prepared->map(it->ownRegions) != 0) it->prepared.reset();  // then registered as they come
    }
  }
  if (it->prepared && !it->prepared->populated()) {
    // A piece per turn: the loop serves its connected peers, timers and sockets in between.
    while (!it->prepared->populated() && populatedThisTurn_ < kPopulatePerTurn) {
      const size_t populated = it->prepared->populate(kPopulatePerTurn - populatedThisTurn_);
      populatedThisTurn_ += populated;
      stats_.populatedAhead += populated;
    }
    stats_.mostPopulatedInOneTurn = std::max(stats_.mostPopulatedInOneTurn, populatedThisTurn_);
    if (!it->prepared->populated()) return Step::NextTurn;
  }
  Admitted admitted = std::move(*it);
  admitted_.erase(it);
  if (countAnswer) countAnswerThisTurn();
  if (admitted.handedOver)
    adopt(admitted.id, std::move(admitted.decision), std::move(admitted.prepared), admitted.bytes);
  else
    setUpAgent(admitted.id, std::move(admitted.decision), std::move(admitted.prepared), admitted.bytes);
  return Step::SetUp;
}

void Listener::releaseUnestablished(Agent* agent) noexcept {
  const uint64_t bytes = agent->unestablishedBytes_;
  agent->unestablishedBytes_ = 0;
  giveBackUnestablished(bytes);
}

void Listener::giveBackUnestablished(uint64_t bytes) noexcept {
  if (bytes == 0) return;
  unestablishedBytes_ -= bytes;
  if (!admitted_.empty()) armNextTurn();  // one that waited for memory may fit now
}

void Listener::takeHandedOver(rdma_cm_id* id, AcceptDecision decision) noexcept {
  // Paced as the listening side paces its requests: a storm handed over in one batch of posts
  // would otherwise be set up in one turn of the worker's loop, its connected peers waiting.
  if (options_.acceptsPerTurn == 0 || answeredThisTurn_ < options_.acceptsPerTurn) {
    countAnswerThisTurn();
    admit(id, std::move(decision), true, true);
    return;
  }
  ++servesWorker_->heldForLaterTurn;
  admit(id, std::move(decision), true, false);
  armNextTurn();
}

bool Listener::onWaitingRequestEvent(const CmEvent& event) noexcept {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id != event.id) continue;
    // Its client went away before its turn came (REJECTED, DISCONNECTED...): nobody to answer.
    waiting_.erase(it);
    forgetAbandonedRequest(event.id);
    return true;
  }
  // Accepted by the factory, not set up yet (a handed-over id's events no longer come here).
  for (auto it = admitted_.begin(); it != admitted_.end(); ++it) {
    if (it->id != event.id || it->handedOver) continue;
    Admitted admitted = std::move(*it);
    admitted_.erase(it);
    if (admitted.begun) giveBackUnestablished(admitted.bytes);
    forgetAbandonedRequest(event.id);
    endUnaccepted(std::move(admitted.decision), 0, nullptr);
    return true;
  }
  return false;
}

void Listener::answer(const CmEvent& event) noexcept {
  if (!id_) {  // closing: a request that was already queued
    ++stats_.rejectedClosing;
    reject(event.id, draining_ ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!requestStillWaiting(event.id)) {
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
    reject(event.id, draining_ ? "the server is draining" : "the server is shutting down");
    return;
  }
  if (!decision.handler) {
    ++stats_.rejectedByFactory;
    reject(event.id, decision.rejectReason.empty() ? "rejected" : decision.rejectReason);
    return;
  }
  if (!workers_.empty())
    handOver(event.id, std::move(decision));
  else
    admit(event.id, std::move(decision), false, true);
}

void Listener::setUpAgent(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<detail::PreparedMappings> prepared,
                          uint64_t bytes) noexcept {
  std::unique_ptr<Agent> owned(
      new Agent(*this, reactor_, std::move(decision.handler), decision.options, options_.acceptTimeout));
  Agent* agent = owned.get();
  agents_.emplace(agent, std::move(owned));
  agent->unestablishedBytes_ = bytes;  // given back once it is established or ends
  const char* op = nullptr;
  if (int rc = agent->accept(CmId(id), decision.privateData, op, prepared.get()); rc != 0) {
    // The client gave up meanwhile: that, not `op`, failed. (On iWARP its TCP connection is gone:
    // the accept's MPA reply meets a reset.)
    if (rc == -ECONNRESET || !requestStillWaiting(agent->cmId())) {
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
  // The fewest agents; on a tie the next in turn, so a burst spreads before any agent counts.
  const size_t count = workers_.size();
  size_t best = nextWorker_ % count;
  for (size_t k = 1; k < count; ++k) {
    const size_t i = (nextWorker_ + k) % count;
    if (workers_[i]->agents.load() < workers_[best]->agents.load()) best = i;
  }
  nextWorker_ = best + 1;
  std::shared_ptr<Worker> worker = workers_[best];
  ++worker->agents;  // counted from now: maxAgents sees it at once
  ++stats_.accepted;  // handed over; the worker's figures say how it went there
  id->context = nullptr;  // an event of it read here before it moves is dropped, not ours
  auto handed = std::make_shared<AcceptDecision>(std::move(decision));
  AgentFactory* factory = &factory_;
  ListenerOptions sideOptions = options_;
  (void)worker->reactor->post([worker, id, handed, factory, sideOptions] {  // listen() checked it accepts posts
    if (!worker->side) {
      worker->side = Listener::create(*worker->reactor, *factory, sideOptions);
      worker->side->servesWorker_ = worker;
    }
    worker->side->takeHandedOver(id, std::move(*handed));
  });
}

void Listener::adopt(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<detail::PreparedMappings> prepared,
                     uint64_t bytes) noexcept {
  int error = 0;
  CmDispatcher* cm = reactor_.cm(error);
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
  if (!requestStillWaiting(id)) {
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
  std::unique_ptr<Agent> owned(
      new Agent(*this, reactor_, std::move(decision.handler), decision.options, options_.acceptTimeout));
  Agent* agent = owned.get();
  agents_.emplace(agent, std::move(owned));
  if (err != 0)
    agent->fail(err, op);
  else
    agent->close();
}

void Listener::reject(rdma_cm_id* id, const std::string& reason) noexcept {
  EVRDMA_LOG(LogLevel::Info, "rejected the connect request of %s: %s", formatAddress(rdma_get_peer_addr(id)).c_str(),
             reason.c_str());
  auto payload = encodeRejectReason(reason);
  rdma_reject(id, payload.data(), static_cast<uint8_t>(payload.size()));
  rdma_destroy_id(id);  // its event is acked already
  ++stats_.rejected;
}

bool Listener::requestStillWaiting(rdma_cm_id* id) noexcept {
  // The QP attributes for INIT come from the kernel's CM state of the request: once the client
  // rejected it (it does when its connect times out) or went away, that state is gone and the
  // kernel answers EINVAL, as it would to rdma_create_qp and rdma_accept.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  int mask = 0;
  return rdma_init_qp_attr(id, &attr, &mask) == 0 || errno != EINVAL;
}

void Listener::forgetAbandonedRequest(rdma_cm_id* id) noexcept {
  ++stats_.abandoned;
  EVRDMA_LOG(LogLevel::Info, "the client %s gave up its connect request before it was answered",
             formatAddress(rdma_get_peer_addr(id)).c_str());
  rdma_destroy_id(id);  // its event is acked already
}

void Listener::dropWaitingRequests() noexcept {
  for (const CmEvent& event : waiting_) rdma_destroy_id(event.id);
  waiting_.clear();
}

void Listener::agentAbandoned(Agent* agent) noexcept {
  ++stats_.abandoned;
  if (servesWorker_) ++servesWorker_->abandoned;
  agent->close();  // not a failure: onClosed only
}

void Listener::agentFinished(Agent* agent) noexcept {
  ++stats_.agentsClosed;
  closedTotals_ += agent->stats();
  if (agent->error() != 0) ++stats_.agentsFailed;
  if (agent->error() == -ETIMEDOUT) ++stats_.agentsTimedOut;
  if (servesWorker_) {
    --servesWorker_->agents;
    ++servesWorker_->closed;
  }
  // Called from the agent's own finish(): free it on a later turn.
  reactor_.defer([this, agent] {
    agents_.erase(agent);
    maybeDrained();
    maybeDelete();
  });
}

void Listener::maybeDelete() noexcept {
  if (!released_ || !agents_.empty() || deleteScheduled_) return;
  deleteScheduled_ = true;
  reactor_.defer([this] {
    if (agents_.empty()) {
      delete this;
    } else {
      deleteScheduled_ = false;  // an agent arrived meanwhile: its end deletes the listener
    }
  });
}

}  // namespace evrdma
