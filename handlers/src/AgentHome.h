// AgentHome: the agents of one Reactor (a listening Listener's own, or those handed to a worker),
// set up from the requests admitted to it: the admitted line under its memory bound, the pace of
// answers per loop turn, the set-up and accept (after moving a handed-over id to this Reactor),
// and each agent's end. Its owner goes once released and the last agent is gone.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "AdmittedLine.h"
#include "AgentOwner.h"
#include "AgentSet.h"
#include "TurnPace.h"
#include "evrdma/Listener.h"
#include "evrdma/Watch.h"

namespace evrdma::detail {

struct ListenerWorker;

class AgentHome final : public AgentOwner {
 public:
  // `stats` counts what happens here; `worker` is set on a worker's side (its figures count too).
  // `onNextTurn`: the owner's work on a turn the pace was armed for (the admitted line's turn has
  // begun). `onAgentGone`: an agent was freed, on a later turn than its end.
  AgentHome(Reactor& reactor, const ListenerOptions& options, ListenerStats& stats,
            std::shared_ptr<ListenerWorker> worker, std::function<void()> onNextTurn,
            std::function<void()> onAgentGone);

  // The pace: at most acceptsPerTurn answers per loop turn.
  bool mayAnswer() const noexcept { return pace_.mayAnswer(); }
  void countAnswer() noexcept;
  void armNextTurn() noexcept { pace_.armNextTurn(); }

  size_t admittedCount() const noexcept { return admitted_.size(); }
  // Memory pinned now for agents not yet established (and the request being populated).
  uint64_t unestablishedBytes() const noexcept { return admitted_.unestablishedBytes(); }
  // A request accepted by the factory (or handed over: `handedOver`) joins the admitted line;
  // with `thisTurn` (its answer counted already), the line takes a step at once.
  void admit(rdma_cm_id* id, AcceptDecision decision, bool handedOver, bool thisTurn) noexcept;
  enum class Served { One, NextTurn, None };
  // One step of the admitted line: One if a request was set up (its answer counted with
  // `countAnswer`), NextTurn if buffers are being populated (the next turn is armed for them),
  // None if the line is empty or all wait for memory (until an agent is established or ends).
  Served serveAdmitted(bool countAnswer) noexcept;
  // Rejects the admitted requests not set up yet (their handlers hear onClosed).
  void rejectAdmitted(const char* reason) noexcept;
  // An event for an admitted request not set up yet (its client gave up): true if it was one.
  bool forgetAdmitted(rdma_cm_id* id) noexcept;

  // Rejects with `reason` (readable by the client), counted.
  void reject(rdma_cm_id* id, const std::string& reason) noexcept;
  // A request whose client gave up: counted, and its id destroyed without an answer.
  void forgetAbandonedRequest(rdma_cm_id* id) noexcept;

  AgentSet& agents() noexcept { return agents_; }
  const AgentSet& agents() const noexcept { return agents_; }
  // Its owner was released: `deleteOwner` runs on a later turn once no agent is left.
  void deleteOwnerWhenEmpty(std::function<void()> deleteOwner) noexcept;
  // The Reactor is gone: ids destroyed unanswered, no next turn, agents freed without callbacks.
  void forget() noexcept;

  void agentAbandoned(Agent& agent) noexcept override;
  void releaseUnestablished(Agent& agent) noexcept override;
  void agentSilent(Agent& agent) noexcept override;
  void agentSilentTooLong(Agent& agent) noexcept override;
  void agentFinished(Agent& agent) noexcept override;

 private:
  uint64_t maxUnestablished() const noexcept;
  // Requests wait for memory: the agent silent longest, once silent kEvictSilentAfter, is closed
  // to make room (one at a time: its memory comes back once its teardown is done); else the
  // eviction timer wakes the line when the oldest will have been silent that long.
  void evictSilent() noexcept;
  void giveBackUnestablished(uint64_t bytes) noexcept;
  // Sets up an agent for the request `id` as `decision` says and accepts, or rejects saying why.
  void setUpAgent(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<PreparedMappings> prepared,
                  uint64_t bytes) noexcept;
  // A handed-over request: its id moves to this Reactor's channel, then its agent is set up.
  void adopt(rdma_cm_id* id, AcceptDecision decision, std::unique_ptr<PreparedMappings> prepared,
             uint64_t bytes) noexcept;
  Agent* makeAgent(AcceptDecision& decision);
  // The request's handler, made by the factory, hears how it ended though it never connected.
  void endUnaccepted(AcceptDecision decision, int err, const char* op) noexcept;
  void maybeDeleteOwner() noexcept;

  Reactor& reactor_;
  const std::chrono::milliseconds acceptTimeout_;
  const std::chrono::milliseconds helloTimeout_;
  const uint64_t maxUnestablishedMemory_;
  ListenerStats& stats_;
  std::shared_ptr<ListenerWorker> worker_;
  std::function<void()> onAgentGone_;
  TurnPace pace_;
  AdmittedLine admitted_;
  AgentSet agents_;
  std::list<Agent*> silent_;  // connected, no hello yet: oldest first
  Agent* evicting_ = nullptr;  // closed to make room, its memory not back yet
  Timer evictionTimer_;
  std::function<void()> deleteOwner_;
  bool deleteScheduled_ = false;
};

}  // namespace evrdma::detail
