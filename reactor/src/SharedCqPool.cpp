// SharedCqPool: a device's shared CQs, the reservations on them, and the routes from a
// completion's QP number and serial to its handler.
#include "SharedCqPool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "Logging.h"
#include "WorkRequestId.h"

namespace evrdma::detail {

SharedCq* SharedCqPool::reserve(uint32_t entries, ibv_comp_channel* channel, int& error) {
  error = 0;
  if (entries == 0 || entries > static_cast<uint32_t>(maxCqe_)) {
    error = -EINVAL;
    return nullptr;
  }
  SharedCq* chosen = nullptr;
  while (!roomy_.empty()) {
    SharedCq* cq = roomy_.back();
    if (cq->capacity - cq->reserved >= entries) {
      chosen = cq;
      break;
    }
    roomy_.popBack();  // back on the list when a reservation on it lets go
  }
  if (chosen == nullptr) {
    auto cq = std::make_unique<SharedCq>();
    cq->capacity = std::min(std::max(kSharedCqEntries, entries), static_cast<uint32_t>(maxCqe_));
    cq->cq = CompletionQueue::create(context_, static_cast<int>(cq->capacity), channel, cq.get(), error);
    if (!cq->cq) return nullptr;
    if (int rc = ibv_req_notify_cq(cq->cq.get(), 0); rc != 0) {
      error = -rc;
      return nullptr;
    }
    chosen = cq.get();
    AsyncEventRouter::instance().ownCq(cq->cq.get(), &inbox_);
    roomy_.add(cq.get());
    cqs_.push_back(std::move(cq));
    ++stats_.sharedCqsCreated;
  }
  chosen->reserved += entries;
  ++reservations_;
  return chosen;
}

void SharedCqPool::bind(CqReservation& reservation, uint32_t qpNum) noexcept {
  reservation.qpNum = qpNum;
  reservation.bound = true;
  byQpNum_[qpNum] = &reservation;
  last_ = nullptr;
  AsyncEventRouter::instance().ownQp(qpNum, context_, &inbox_);
}

bool SharedCqPool::unreserve(CqReservation& reservation) noexcept {
  if (reservation.bound) {
    auto it = byQpNum_.find(reservation.qpNum);
    if (it != byQpNum_.end() && it->second == &reservation) {
      byQpNum_.erase(it);
      last_ = nullptr;
      AsyncEventRouter::instance().disownQp(reservation.qpNum, context_, &inbox_);
    }
  }
  reservation.cq->reserved -= reservation.entries;
  --reservations_;
  roomy_.add(reservation.cq);
  return reservation.cq->reserved == 0 && cqs_.size() > 1;
}

CqReservation* SharedCqPool::find(uint32_t qpNum) noexcept {
  auto it = byQpNum_.find(qpNum);
  if (it == byQpNum_.end()) return nullptr;
  last_ = it->second;
  return last_;
}

SharedReceiveQueue* SharedCqPool::sharedReceiveQueueWithSerial(uint32_t serial) const noexcept {
  for (const auto& srq : srqs_)
    if (srq->serial() == serial) return srq;
  return nullptr;
}

uint32_t SharedCqPool::takeSerial() noexcept {
  const uint32_t serial = nextSerial_;
  nextSerial_ = nextSerial_ == wrid::kSerialMask ? 1 : nextSerial_ + 1;
  return serial;
}

void SharedCqPool::destroy(size_t index) noexcept {
  SharedCq& cq = *cqs_[index];
  AsyncEventRouter::instance().disownCq(cq.cq.get());
  roomy_.remove(&cq);
  if (int rc = cq.cq.reset(); rc != 0)
    EVRDMA_LOG(LogLevel::Warn, "%s: destroying an idle shared CQ failed (%s)",
               context_ != nullptr && context_->device != nullptr ? ibv_get_device_name(context_->device) : "?",
               strerror(-rc));
  cqs_.erase(cqs_.begin() + static_cast<std::ptrdiff_t>(index));
  ++stats_.sharedCqsReleased;
}

void SharedCqPool::clear() noexcept {
  byQpNum_.clear();
  last_ = nullptr;
  srqs_.clear();
  roomy_.clear();
  cqs_.clear();  // each acks its events first
}

}  // namespace evrdma::detail
