// CompletionDispatcher: its channel, the attachments of connections to its SharedCqPool, the
// drained callbacks, and the trim of idle CQs. The polling pass is in CompletionPass.cpp.
#include "CompletionDispatcher.h"

#include <event2/event.h>

#include <algorithm>
#include <cerrno>

namespace evrdma {

CompletionDispatcher::Attachment::~Attachment() { owner_.detach(*this); }

void CompletionDispatcher::Attachment::whenDrained(std::function<void()> then) {
  whenDrained_ = std::move(then);
  owner_.awaitDrain(*this);
}

void CompletionDispatcher::awaitDrain(Attachment& attachment) {
  if (removed_) {  // nothing more will be handed out: the device is gone
    std::function<void()> then = std::move(attachment.whenDrained_);
    then();
    return;
  }
  if (std::find(awaitingDrain_.begin(), awaitingDrain_.end(), &attachment) == awaitingDrain_.end())
    awaitingDrain_.push_back(&attachment);
  SharedCq& cq = attachment.sharedCq();
  attachment.drainedAt_ = cq.handedOut + cq.capacity;
  if (!cq.queued) {
    cq.queued = true;
    ready_.push_back(&cq);
  }
  resume_.schedule();  // a pass on a later turn, as when a turn's budget was spent
}

void CompletionDispatcher::callDrained(bool all) noexcept {
  // Taken out first: a callback may ask again, or detach another attachment (on a later turn:
  // attachments are destroyed outside their handlers' callbacks).
  const auto firstDrained =
      std::stable_partition(awaitingDrain_.begin(), awaitingDrain_.end(), [all](const Attachment* a) {
        return !all && a->sharedCq().queued && a->sharedCq().handedOut < a->drainedAt_;
      });
  const std::vector<Attachment*> drained(firstDrained, awaitingDrain_.end());
  awaitingDrain_.erase(firstDrained, awaitingDrain_.end());
  for (Attachment* attachment : drained) {
    std::function<void()> then = std::move(attachment->whenDrained_);
    if (then) then();
  }
}

std::unique_ptr<CompletionDispatcher::Attachment> CompletionDispatcher::attach(uint32_t entries,
                                                                               CompletionHandler* handler, int& error) {
  error = 0;
  if (removed_) {
    error = -ENODEV;
    return nullptr;
  }
  SharedCq* cq = pool_.reserve(entries, channel_.get(), error);
  if (cq == nullptr) return nullptr;
  return std::unique_ptr<Attachment>(new Attachment(*this, *cq, entries, pool_.takeSerial(), handler));
}

void CompletionDispatcher::detach(Attachment& attachment) noexcept {
  awaitingDrain_.erase(std::remove(awaitingDrain_.begin(), awaitingDrain_.end(), &attachment), awaitingDrain_.end());
  if (pool_.unreserve(attachment.reservation_)) trimTurn_.schedule();
  owner_.onDetached();
}

CompletionHandler* CompletionDispatcher::handlerOfQp(uint32_t qpNum) noexcept {
  detail::CqReservation* reservation = pool_.boundTo(qpNum);
  return reservation != nullptr ? reservation->handler : nullptr;
}

std::vector<CompletionHandler*> CompletionDispatcher::handlersOfCq(const ibv_cq* cq) const {
  return pool_.handlersWhere([cq](const detail::CqReservation& r) { return r.cq->cq.get() == cq; });
}

std::vector<CompletionHandler*> CompletionDispatcher::handlersReceivingThrough(const ibv_srq* srq) const {
  return pool_.handlersWhere([srq](const detail::CqReservation& r) { return r.srq != nullptr && r.srq->get() == srq; });
}

CompletionDispatcher::~CompletionDispatcher() { releaseVerbs(); }

int CompletionDispatcher::init() noexcept {
  errno = 0;
  channel_.reset(ibv_create_comp_channel(context_));
  if (!channel_) return errno ? -errno : -ENOMEM;
  if (int rc = setNonBlocking(channel_->fd); rc != 0) return rc;
  event_ = event_new(base_, channel_->fd, EV_READ | EV_PERSIST, &CompletionDispatcher::onReadable, this);
  if (event_ == nullptr || event_add(event_, nullptr) != 0) return -ENOMEM;
  if (resume_.init(base_, &CompletionDispatcher::onReadable, this) != 0) return -ENOMEM;
  if (polling_.init(base_) != 0) return -ENOMEM;
  if (trimTurn_.init(base_, &CompletionDispatcher::onTrimTurn, this) != 0) return -ENOMEM;
  return 0;
}

void CompletionDispatcher::stop() noexcept {
  if (removed_) return;
  removed_ = true;
  for (CompletionHandler* handler : pool_.handlersWhere([](const detail::CqReservation&) { return true; }))
    handler->onDeviceRemoved();  // they fail, and detach later
  if (event_ != nullptr) event_del(event_);
  dropPendingWork();
  callDrained(true);  // nothing more will be handed out
}

void CompletionDispatcher::dropPendingWork() noexcept {
  resume_.cancel();
  polling_.stop();
  trimTurn_.cancel();
  ready_.clear();
  for (SharedCq* cq : recent_) cq->recent = false;
  recent_.clear();
  for (size_t i = 0; i < pool_.size(); ++i) pool_[i].queued = false;
}

void CompletionDispatcher::releaseVerbs() noexcept {
  if (event_ != nullptr) event_free(event_);
  event_ = nullptr;
  dropPendingWork();
  pool_.clear();  // the CQs, then the channel
  channel_.reset();
}

void CompletionDispatcher::onTrimTurn(int, short, void* self) noexcept {
  static_cast<CompletionDispatcher*>(self)->releaseIdleCqs();
}

void CompletionDispatcher::releaseIdleCqs() noexcept {
  if (removed_) return;  // Device::releaseVerbs destroys them all
  if (delivering_) {  // an application callback runs a nested loop inside a pass
    trimTurn_.schedule();
    return;
  }
  pool_.releaseIdle([this](SharedCq& cq) { serveAll(cq); },
                    [this](SharedCq& cq) {
                      if (cq.queued) ready_.remove(&cq);
                      if (cq.recent) recent_.erase(std::find(recent_.begin(), recent_.end(), &cq));
                    });
  if (firstToPoll_ >= pool_.size()) firstToPoll_ = 0;
}

}  // namespace evrdma
