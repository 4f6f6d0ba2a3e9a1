// AgentHome: admitted requests set up in turn and under the memory bound, the accept, and the
// agents' end, on one Reactor.
#include "AgentHome.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "AgentCore.h"
#include "CmDispatcher.h"
#include "ConnectRequests.h"
#include "ReactorCore.h"
#include "WorkerPool.h"
#include "evrdma/PrivateData.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {

AgentHome::AgentHome(Reactor& reactor, const ListenerOptions& options, ListenerStats& stats,
                     std::shared_ptr<ListenerWorker> worker, std::function<void()> onNextTurn,
                     std::function<void()> onAgentGone)
    : reactor_(reactor),
      acceptTimeout_(options.acceptTimeout),
      helloTimeout_(options.helloTimeout),
      maxUnestablishedMemory_(options.maxUnestablishedMemory),
      stats_(stats),
      worker_(std::move(worker)),
      onAgentGone_(std::move(onAgentGone)),
      pace_(reactor, options.acceptsPerTurn,
            [this, onNextTurn = std::move(onNextTurn)] {
              admitted_.startTurn();
              onNextTurn();
            }),
      admitted_(stats),
      evictionTimer_(reactor, [this] { pace_.armNextTurn(); }) {
  if (worker_) admitted_.alsoCountHeldIn(&worker_->heldForMemory);
}

void AgentHome::countAnswer() noexcept {
  const uint32_t answered = pace_.countAnswer();
  if (worker_ && answered > worker_->mostInOneTurn.load()) worker_->mostInOneTurn = answered;
}

void AgentHome::admit(rdma_cm_id* id, AcceptDecision decision, bool handedOver, bool thisTurn) noexcept {
  admitted_.push(id, std::move(decision), handedOver);
  // Its answer was counted already. It goes now unless older ones go first, or it waits for memory.
  if (thisTurn) (void)serveAdmitted(false);
}

AgentHome::Served AgentHome::serveAdmitted(bool countAnswerNow) noexcept {
  AdmittedLine::Request ready;
  const AdmittedLine::Step step = admitted_.step(maxUnestablished(), Listener::kPopulatePerTurn, ready);
  if (step == AdmittedLine::Step::NextTurn) {
    pace_.armNextTurn();
    return Served::NextTurn;
  }
  if (step == AdmittedLine::Step::WaitsForMemory && !admitted_.empty()) evictSilent();  // (an empty line says so too)
  if (step != AdmittedLine::Step::Ready) return Served::None;
  if (countAnswerNow) countAnswer();
  if (ready.handedOver)
    adopt(ready.id, std::move(ready.decision), std::move(ready.prepared), ready.bytes);
  else
    setUpAgent(ready.id, std::move(ready.decision), std::move(ready.prepared), ready.bytes);
  return Served::One;
}

void AgentHome::rejectAdmitted(const char* reason) noexcept {
  // Accepted, not set up yet: the client is told no, the handler the factory made hears onClosed.
  AdmittedLine::Request admitted;
  while (admitted_.takeFront(admitted)) {
    ++stats_.rejectedClosing;
    if (worker_) ++worker_->rejected;
    reject(admitted.id, reason);
    endUnaccepted(std::move(admitted.decision), 0, nullptr);
  }
}

bool AgentHome::forgetAdmitted(rdma_cm_id* id) noexcept {
  // (A handed-over id's events no longer come to the listening side.)
  AdmittedLine::Request admitted;
  if (!admitted_.take(id, admitted)) return false;
  if (admitted.begun && !admitted_.empty()) pace_.armNextTurn();  // one that waited for memory may fit now
  forgetAbandonedRequest(id);
  endUnaccepted(std::move(admitted.decision), 0, nullptr);
  return true;
}

uint64_t AgentHome::maxUnestablished() const noexcept {
  if (maxUnestablishedMemory_ != 0) return maxUnestablishedMemory_;
  const uint64_t budget = reactor_.memoryBudget();
  return budget != 0 ? std::max<uint64_t>(budget / 4, 1) : uint64_t{256} << 20;
}

void AgentHome::agentSilent(Agent& agent) noexcept {
  AgentCore& core = coreOf(agent);
  if (core.silent) return;
  core.silent = true;
  core.silentSince = std::chrono::steady_clock::now();
  core.silentEntry = silent_.insert(silent_.end(), &agent);
}

void AgentHome::agentSilentTooLong(Agent& agent) noexcept {
  ++stats_.silentClosed;
  coreOf(agent).fail(-ETIMEDOUT, "hello: the client completed the connection but said no hello within helloTimeout");
}

void AgentHome::evictSilent() noexcept {
  if (evicting_ != nullptr || silent_.empty()) return;
  Agent* oldest = silent_.front();
  AgentCore& core = coreOf(*oldest);
  const auto silentFor = std::chrono::steady_clock::now() - core.silentSince;
  if (silentFor < ListenerOptions::kEvictSilentAfter) {
    // Woken then (a line blocked by memory otherwise waits for an agent to end or be established).
    evictionTimer_.startOnce(std::chrono::duration_cast<std::chrono::milliseconds>(ListenerOptions::kEvictSilentAfter - silentFor) +
                             std::chrono::milliseconds(1));
    return;
  }
  evicting_ = oldest;
  ++stats_.silentEvicted;
  core.fail(-ETIMEDOUT, "hello: the client completed the connection but said no hello, and other clients waited for "
                        "the memory it held");
}

void AgentHome::releaseUnestablished(Agent& agent) noexcept {
  AgentCore& core = coreOf(agent);
  if (core.silent) {
    core.silent = false;
    silent_.erase(core.silentEntry);
  }
  if (evicting_ == &agent) evicting_ = nullptr;  // its memory comes back now
  const uint64_t bytes = core.unestablishedBytes;
  core.unestablishedBytes = 0;
  giveBackUnestablished(bytes);
}

void AgentHome::giveBackUnestablished(uint64_t bytes) noexcept {
  if (admitted_.giveBack(bytes)) pace_.armNextTurn();  // one that waited for memory may fit now
}

Agent* AgentHome::makeAgent(AcceptDecision& decision) {
  return agents_.add(std::make_unique<Agent>(
      std::make_unique<AgentCore>(*this, reactor_, std::move(decision.handler), decision.options, acceptTimeout_,
                                  helloTimeout_)));
}

void AgentHome::setUpAgent(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<PreparedMappings> prepared,
                           uint64_t bytes) noexcept {
  Agent* agent = makeAgent(decision);
  AgentCore& core = coreOf(*agent);
  core.unestablishedBytes = bytes;  // given back once it is established or ends
  const char* op = nullptr;
  if (int rc = core.accept(CmId(id), decision.privateData, op, prepared.get()); rc != 0) {
    // The client gave up meanwhile: that, not `op`, failed. (On iWARP its TCP connection is gone:
    // the accept's MPA reply meets a reset.)
    if (rc == -ECONNRESET || !requestStillWaiting(agent->cmId())) {
      agentAbandoned(*agent);
      return;
    }
    // Tell the client why (the agent keeps its id), then let the handler the factory made hear it
    // too: onError, onClosed.
    refuseRequest(agent->cmId(), std::string("server could not set up the connection: ") + op + ": " + strerror(-rc));
    ++stats_.rejected;
    ++stats_.rejectedSetup;
    if (worker_) ++worker_->rejected;
    core.fail(rc, op);
    return;
  }
  ++stats_.accepted;
  if (worker_) ++worker_->accepted;
}

void AgentHome::adopt(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<PreparedMappings> prepared,
                      uint64_t bytes) noexcept {
  int error = 0;
  CmDispatcher* cm = coreOf(reactor_).cm(error);
  // Its CM events come to this Reactor from now on. (librdmacm waits, if need be, until the
  // listening Reactor has acked those it read already: it acks before dispatching.)
  if (cm != nullptr && rdma_migrate_id(id, cm->channel()) != 0) error = errno ? -errno : -EINVAL;
  if (error != 0) {
    giveBackUnestablished(bytes);  // no agent will hold them
    const std::string why = std::string("server could not set up the connection: rdma_migrate_id: ") + strerror(-error);
    reject(id, why);
    ++stats_.rejectedSetup;
    if (worker_) ++worker_->rejected;
    endUnaccepted(std::move(decision), error, why.c_str());
    return;
  }
  if (!requestStillWaiting(id)) {
    giveBackUnestablished(bytes);
    forgetAbandonedRequest(id);
    endUnaccepted(std::move(decision), 0, nullptr);
    return;
  }
  setUpAgent(id, std::move(decision), std::move(prepared), bytes);
}

void AgentHome::endUnaccepted(AcceptDecision decision, int err, const char* op) noexcept {
  // The factory made a handler for a request that will never be a connection (on the listening
  // thread, before the hand-over): it still hears how it ended, onError if it failed, then
  // onClosed, from an agent that never had an id. Its end counts it out of the worker's agents.
  Agent* agent = makeAgent(decision);
  if (err != 0)
    coreOf(*agent).fail(err, op);
  else
    agent->close();
}

void AgentHome::reject(rdma_cm_id* id, const std::string& reason) noexcept {
  rejectRequest(id, reason);
  ++stats_.rejected;
}

void AgentHome::forgetAbandonedRequest(rdma_cm_id* id) noexcept {
  ++stats_.abandoned;
  if (worker_) ++worker_->abandoned;
  detail::forgetAbandonedRequest(id);
}

void AgentHome::agentAbandoned(Agent& agent) noexcept {
  ++stats_.abandoned;
  if (worker_) ++worker_->abandoned;
  agent.close();  // not a failure: onClosed only
}

void AgentHome::agentFinished(Agent& agent) noexcept {
  agents_.noteFinished(agent, stats_);
  if (worker_) {
    --worker_->agents;
    ++worker_->closed;
  }
  // Called from the agent's own finish(): freed on a later turn.
  reactor_.defer([this, gone = &agent] {
    agents_.erase(gone);
    onAgentGone_();
    maybeDeleteOwner();
  });
}

void AgentHome::deleteOwnerWhenEmpty(std::function<void()> deleteOwner) noexcept {
  deleteOwner_ = std::move(deleteOwner);
  maybeDeleteOwner();
}

void AgentHome::maybeDeleteOwner() noexcept {
  if (!deleteOwner_ || !agents_.empty() || deleteScheduled_) return;
  deleteScheduled_ = true;
  reactor_.defer([this] {
    if (agents_.empty()) {
      std::function<void()> deleteOwner = std::move(deleteOwner_);
      deleteOwner();  // this home goes with its owner
    } else {
      deleteScheduled_ = false;  // an agent arrived meanwhile: its end deletes the owner
    }
  });
}

void AgentHome::forget() noexcept {
  silent_.clear();
  evicting_ = nullptr;
  admitted_.destroyIds();
  pace_.stop();
  agents_.clear();
}

}  // namespace evrdma::detail
