// CmEventQueue: CM events read out of the channel ahead of their dispatch (each copied and acked
// as it is read), oldest first, and which of them each id has waiting. An id that is destroyed or
// handed to another Reactor takes its waiting events with it (forget), so no event outlives its id;
// a listening id takes the connect requests waiting for it, whose new ids are then the caller's
// to destroy (the kernel destroys those of requests nobody read, when their listening id goes).
// Guarded by a mutex: an id may be destroyed on another Reactor's thread (a hand-over that failed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "CmEvent.h"

namespace evrdma::detail {

class CmEventQueue {
 public:
  void push(CmEvent event);
  // The oldest event, or false if none waits. A forgotten one comes out with id == nullptr.
  bool pop(CmEvent& out) noexcept;
  // Takes the id's waiting events out of dispatch (they stay in line as empty places), and the
  // connect requests waiting for it if it listens: their new ids are added to `requestIds`.
  // Returns how many events. O(the id's own events), whatever the queue holds: a drain destroys
  // thousands of ids.
  size_t forget(rdma_cm_id* id, std::vector<rdma_cm_id*>& requestIds);
  size_t size() const noexcept;
  size_t mostWaiting() const noexcept;  // the most that ever waited at once

 private:
  void removePlace(rdma_cm_id* key, uint64_t place) noexcept;

  mutable std::mutex mutex_;
  std::deque<CmEvent> events_;
  uint64_t frontSequence_ = 0;  // events_[i] is number frontSequence_ + i
  // The places of each id's events, oldest first; a connect request's also under its listening id.
  std::unordered_map<rdma_cm_id*, std::vector<uint64_t>> placesOf_;
  size_t mostWaiting_ = 0;
};

}  // namespace evrdma::detail
