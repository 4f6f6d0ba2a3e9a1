// AsyncEventRouter: reading a device's async events once per process and handing each to the
// Reactor whose CQ, QP or SRQ it names.
#include "AsyncEventRouter.h"

namespace evrdma::detail {

AsyncEventRouter& AsyncEventRouter::instance() {
  static AsyncEventRouter router;  // lives until exit: Reactors may be destroyed in any order
  return router;
}

void AsyncEventRouter::addInbox(ibv_context* context, AsyncInbox* inbox) {
  std::lock_guard<std::mutex> lock(mutex_);
  inboxes_.emplace(context, inbox);
}

void AsyncEventRouter::removeInbox(AsyncInbox* inbox) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = inboxes_.begin(); it != inboxes_.end();) it = it->second == inbox ? inboxes_.erase(it) : std::next(it);
  for (auto it = qps_.begin(); it != qps_.end();) it = it->second == inbox ? qps_.erase(it) : std::next(it);
  for (auto it = objects_.begin(); it != objects_.end();) it = it->second == inbox ? objects_.erase(it) : std::next(it);
}

void AsyncEventRouter::ownQp(uint32_t qpNum, ibv_context* context, AsyncInbox* inbox) {
  std::lock_guard<std::mutex> lock(mutex_);
  qps_[{context, qpNum}] = inbox;
}

void AsyncEventRouter::disownQp(uint32_t qpNum, ibv_context* context, AsyncInbox* inbox) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = qps_.find({context, qpNum});
  if (it != qps_.end() && it->second == inbox) qps_.erase(it);
}

void AsyncEventRouter::ownCq(ibv_cq* cq, AsyncInbox* inbox) {
  std::lock_guard<std::mutex> lock(mutex_);
  objects_[cq] = inbox;
}

void AsyncEventRouter::disownCq(ibv_cq* cq) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  objects_.erase(cq);
}

void AsyncEventRouter::ownSrq(ibv_srq* srq, AsyncInbox* inbox) {
  std::lock_guard<std::mutex> lock(mutex_);
  objects_[srq] = inbox;
}

bool AsyncEventRouter::forward(ibv_context* context, AsyncInbox* reader, const AsyncEventCopy& event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  AsyncInbox* owner = nullptr;
  switch (event.type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      if (auto it = qps_.find({context, event.qpNum}); it != qps_.end()) owner = it->second;
      break;
    case IBV_EVENT_CQ_ERR:
      if (auto it = objects_.find(event.cq); it != objects_.end()) owner = it->second;
      break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR:
      if (auto it = objects_.find(event.srq); it != objects_.end()) owner = it->second;
      break;
    case IBV_EVENT_DEVICE_FATAL: {
      auto [first, last] = inboxes_.equal_range(context);
      for (auto it = first; it != last; ++it)
        if (it->second != reader) it->second->post(event);
      return false;  // the reader handles it too
    }
    default:
      return false;
  }
  if (owner == nullptr || owner == reader) return false;
  owner->post(event);
  return true;
}

}  // namespace evrdma::detail
