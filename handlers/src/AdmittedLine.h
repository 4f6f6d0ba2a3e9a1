// AdmittedLine: the connect requests a Listener's factory accepted (on a worker: those handed
// over) whose agents are not set up yet, oldest first, and the bound on the memory pinned for
// agents not yet established (ListenerOptions::maxUnestablishedMemory). It picks which request
// goes next and populates its large buffers a piece per loop turn; the Listener sets it up.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "PreparedMappings.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Listener.h"

namespace evrdma::detail {

class AdmittedLine {
 public:
  struct Request {
    rdma_cm_id* id = nullptr;
    AcceptDecision decision;
    bool handedOver = false;     ///< its id is still on the listening Reactor's channel
    bool begun = false;          ///< its bytes count as unestablished, its buffers are being populated
    bool heldForMemory = false;
    uint64_t bytes = 0;          ///< what its agent pins
    std::vector<size_t> ownRegions;  ///< its buffers too large for the arena
    std::unique_ptr<PreparedMappings> prepared;
  };
  enum class Step { Ready, NextTurn, WaitsForMemory };

  // `stats` gets heldForMemory, mostUnestablishedMemory, populatedAhead, mostPopulatedInOneTurn.
  explicit AdmittedLine(ListenerStats& stats) : stats_(stats) {}
  // On a worker's side: its figures count the requests that waited for memory too.
  void alsoCountHeldIn(std::atomic<uint64_t>* heldForMemory) noexcept { workerHeldForMemory_ = heldForMemory; }

  bool empty() const noexcept { return line_.empty(); }
  size_t size() const noexcept { return line_.size(); }
  // Memory pinned now for agents not yet established and for the request being populated.
  uint64_t unestablishedBytes() const noexcept { return unestablishedBytes_; }

  // Joins the line, its memory reckoned from its options.
  void push(rdma_cm_id* id, AcceptDecision decision, bool handedOver);
  // One step: the request whose buffers are being populated gets its next piece, or is Ready
  // (moved into `ready`, its bytes counted as unestablished until giveBack) once they are; else
  // the oldest that fits `bound` begins. A loop turn populates at most `perTurn` bytes.
  Step step(uint64_t bound, uint64_t perTurn, Request& ready) noexcept;
  // A new loop turn: its populating starts from nothing.
  void startTurn() noexcept { populatedThisTurn_ = 0; }
  // `bytes` no longer count as unestablished (an agent was established or ended). True if a
  // request waits that may fit now.
  bool giveBack(uint64_t bytes) noexcept;
  // Takes out the oldest request (its bytes given back if it had begun). False if none.
  bool takeFront(Request& out) noexcept;
  // Takes out the request of `id` not handed over (its client gave up). False if none.
  bool take(rdma_cm_id* id, Request& out) noexcept;
  // The Reactor is gone: every request's id destroyed, unanswered (its event is acked already).
  void destroyIds() noexcept;

 private:
  // Large requests (over an eighth of the bound) share three quarters of it.
  bool waitsForMemory(uint64_t bytes, uint64_t bound) const noexcept;

  ListenerStats& stats_;
  std::atomic<uint64_t>* workerHeldForMemory_ = nullptr;
  std::deque<Request> line_;
  uint64_t unestablishedBytes_ = 0;
  uint64_t populatedThisTurn_ = 0;
};

}  // namespace evrdma::detail
