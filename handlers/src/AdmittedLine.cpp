// AdmittedLine: accepted requests waiting to be set up, the unestablished-memory bound, and the
// populating of large buffers a piece per turn.
#include "AdmittedLine.h"

#include <algorithm>

#include "BufferMemory.h"
#include "CmDispatcher.h"
#include "QueuePair.h"

namespace evrdma::detail {

void AdmittedLine::push(rdma_cm_id* id, AcceptDecision decision, bool handedOver) {
  Request request;
  request.id = id;
  request.decision = std::move(decision);
  request.handedOver = handedOver;
  QueuePair::MemoryNeeds needs = QueuePair::memoryNeeds(request.decision.options);
  const uint64_t pool = request.decision.options.lendingPoolBytes;
  request.bytes = needs.pinned + (pool > 0 ? BufferMemory::pinnedBytes(pool) : 0);
  request.ownRegions = std::move(needs.ownRegions);
  line_.push_back(std::move(request));
}

bool AdmittedLine::waitsForMemory(uint64_t bytes, uint64_t bound) const noexcept {
  // The last quarter is kept for small requests, which a few large ones whose clients never
  // complete would otherwise hold up until acceptTimeout. One request always goes when no other
  // holds any: else one larger than the bound never would.
  const uint64_t limit = bytes > bound / 8 ? bound - bound / 4 : bound;
  return unestablishedBytes_ > 0 && bytes > limit - std::min(limit, unestablishedBytes_);
}

AdmittedLine::Step AdmittedLine::step(uint64_t bound, uint64_t perTurn, Request& ready) noexcept {
  // The one whose buffers are being populated goes on; else the oldest whose memory fits: one
  // that does not fit lets smaller ones behind it go first (a request for large buffers whose
  // client never completes must not hold up every other client until acceptTimeout).
  auto it = std::find_if(line_.begin(), line_.end(), [](const Request& r) { return r.begun; });
  if (it == line_.end()) {
    for (it = line_.begin(); it != line_.end() && waitsForMemory(it->bytes, bound); ++it) {
      if (it->heldForMemory) continue;
      it->heldForMemory = true;
      ++stats_.heldForMemory;
      if (workerHeldForMemory_ != nullptr) ++*workerHeldForMemory_;
    }
    if (it == line_.end()) return Step::WaitsForMemory;
    it->begun = true;
    unestablishedBytes_ += it->bytes;
    stats_.mostUnestablishedMemory = std::max(stats_.mostUnestablishedMemory, unestablishedBytes_);
    uint64_t large = 0;
    for (size_t bytes : it->ownRegions) large += bytes;
    if (large > perTurn) {
      it->prepared = std::make_unique<PreparedMappings>();
      if (it->prepared->map(it->ownRegions) != 0) it->prepared.reset();  // then registered as they come
    }
  }
  if (it->prepared && !it->prepared->populated()) {
    // A piece per turn: the loop serves its connected peers, timers and sockets in between.
    while (!it->prepared->populated() && populatedThisTurn_ < perTurn) {
      const size_t populated = it->prepared->populate(perTurn - populatedThisTurn_);
      populatedThisTurn_ += populated;
      stats_.populatedAhead += populated;
    }
    stats_.mostPopulatedInOneTurn = std::max(stats_.mostPopulatedInOneTurn, populatedThisTurn_);
    if (!it->prepared->populated()) return Step::NextTurn;
  }
  ready = std::move(*it);
  line_.erase(it);
  return Step::Ready;
}

bool AdmittedLine::giveBack(uint64_t bytes) noexcept {
  if (bytes == 0) return false;
  unestablishedBytes_ -= bytes;
  return !line_.empty();
}

bool AdmittedLine::takeFront(Request& out) noexcept {
  if (line_.empty()) return false;
  out = std::move(line_.front());
  line_.pop_front();
  if (out.begun) (void)giveBack(out.bytes);
  return true;
}

bool AdmittedLine::take(rdma_cm_id* id, Request& out) noexcept {
  for (auto it = line_.begin(); it != line_.end(); ++it) {
    if (it->id != id || it->handedOver) continue;  // a handed-over id's events no longer come here
    out = std::move(*it);
    line_.erase(it);
    if (out.begun) (void)giveBack(out.bytes);
    return true;
  }
  return false;
}

void AdmittedLine::destroyIds() noexcept {
  for (Request& request : line_) destroyCmId(request.id);
  line_.clear();
}

}  // namespace evrdma::detail
