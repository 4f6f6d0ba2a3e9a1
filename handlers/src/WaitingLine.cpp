// WaitingLine: the requests past a turn's acceptsPerTurn, oldest first.
#include "WaitingLine.h"

#include "CmDispatcher.h"

namespace evrdma::detail {

bool WaitingLine::popFront(CmEvent& out) noexcept {
  if (line_.empty()) return false;
  out = std::move(line_.front());
  line_.pop_front();
  return true;
}

bool WaitingLine::take(rdma_cm_id* id) noexcept {
  for (auto it = line_.begin(); it != line_.end(); ++it) {
    if (it->id != id) continue;
    line_.erase(it);
    return true;
  }
  return false;
}

void WaitingLine::destroyIds() noexcept {
  for (const CmEvent& event : line_) destroyCmId(event.id);
  line_.clear();
}

}  // namespace evrdma::detail
