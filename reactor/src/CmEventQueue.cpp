// CmEventQueue: a line of read-ahead CM events with an index of each id's places in it.
#include "CmEventQueue.h"

#include <algorithm>
#include <utility>

namespace evrdma::detail {

namespace {
bool isRequest(const CmEvent& event) noexcept {
  return event.type == RDMA_CM_EVENT_CONNECT_REQUEST && event.listenId != nullptr && event.listenId != event.id;
}
}  // namespace

void CmEventQueue::push(CmEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t place = frontSequence_ + events_.size();
  if (event.id != nullptr) placesOf_[event.id].push_back(place);
  if (isRequest(event)) placesOf_[event.listenId].push_back(place);
  events_.push_back(std::move(event));
  mostWaiting_ = std::max(mostWaiting_, events_.size());
}

void CmEventQueue::removePlace(rdma_cm_id* key, uint64_t place) noexcept {
  auto it = placesOf_.find(key);
  if (it == placesOf_.end()) return;  // the key was forgotten already
  std::vector<uint64_t>& places = it->second;
  auto found = std::find(places.begin(), places.end(), place);  // the first, but for a forgotten request
  if (found != places.end()) places.erase(found);
  if (places.empty()) placesOf_.erase(it);
}

bool CmEventQueue::pop(CmEvent& out) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return false;
  out = std::move(events_.front());
  events_.pop_front();
  const uint64_t place = frontSequence_++;
  if (out.id != nullptr) removePlace(out.id, place);
  if (out.id != nullptr && isRequest(out)) removePlace(out.listenId, place);
  return true;
}

size_t CmEventQueue::forget(rdma_cm_id* id, std::vector<rdma_cm_id*>& requestIds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = placesOf_.find(id);
  if (it == placesOf_.end()) return 0;
  const std::vector<uint64_t> places = std::move(it->second);
  placesOf_.erase(it);
  for (uint64_t place : places) {
    CmEvent& event = events_[place - frontSequence_];
    if (event.id == id) {
      if (isRequest(event)) removePlace(event.listenId, place);  // its listener waits for it no more
    } else if (event.id != nullptr) {
      // A connect request to the listening id that goes: the caller destroys its new id (which
      // forgets that id's later events), as the kernel does for requests nobody read.
      removePlace(event.id, place);
      requestIds.push_back(event.id);
    }
    event.id = nullptr;
  }
  return places.size();
}

size_t CmEventQueue::size() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

size_t CmEventQueue::mostWaiting() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return mostWaiting_;
}

}  // namespace evrdma::detail
