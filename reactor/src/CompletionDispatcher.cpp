// CompletionDispatcher: a device's CQ pool and completion channel for one Reactor, polling with a
// budget per turn, arming, and the routing of each completion to its QP's handler.
#include "CompletionDispatcher.h"

#include <event2/event.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "Logging.h"
#include "evrdma/Reactor.h"

namespace evrdma {

template <typename Predicate>
std::vector<CompletionHandler*> CompletionDispatcher::handlersWhere(Predicate matches) const {
  std::vector<CompletionHandler*> handlers;
  for (const auto& [qpNum, attachment] : byQpNum_)
    if (matches(*attachment)) handlers.push_back(attachment->handler_);
  return handlers;
}

ibv_cq* CompletionDispatcher::Attachment::cq() const noexcept { return cq_.cq.get(); }

void CompletionDispatcher::Attachment::bind(uint32_t qpNum) noexcept {
  qpNum_ = qpNum;
  bound_ = true;
  owner_.byQpNum_[qpNum] = this;
  owner_.lastAttachment_ = nullptr;
  detail::AsyncEventRouter::instance().ownQp(qpNum, owner_.context_, &owner_.inbox_);
}

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
  attachment.drainedAt_ = attachment.cq_.handedOut + attachment.cq_.capacity;
  if (!attachment.cq_.queued) {
    attachment.cq_.queued = true;
    ready_.push_back(&attachment.cq_);
  }
  resume_.schedule();  // a pass on a later turn, as when a turn's budget was spent
}

void CompletionDispatcher::callDrained(bool all) noexcept {
  // Taken out first: a callback may ask again, or detach another attachment (on a later turn:
  // attachments are destroyed outside their handlers' callbacks).
  const auto firstDrained = std::stable_partition(awaitingDrain_.begin(), awaitingDrain_.end(),
                                                  [all](const Attachment* a) {
                                                    return !all && a->cq_.queued && a->cq_.handedOut < a->drainedAt_;
                                                  });
  const std::vector<Attachment*> drained(firstDrained, awaitingDrain_.end());
  awaitingDrain_.erase(firstDrained, awaitingDrain_.end());
  for (Attachment* attachment : drained) {
    std::function<void()> then = std::move(attachment->whenDrained_);
    if (then) then();
  }
}

void CompletionDispatcher::detach(Attachment& attachment) noexcept {
  if (attachment.bound_) {
    auto it = byQpNum_.find(attachment.qpNum_);
    if (it != byQpNum_.end() && it->second == &attachment) {
      byQpNum_.erase(it);
      lastAttachment_ = nullptr;
      detail::AsyncEventRouter::instance().disownQp(attachment.qpNum_, context_, &inbox_);
    }
  }
  awaitingDrain_.erase(std::remove(awaitingDrain_.begin(), awaitingDrain_.end(), &attachment), awaitingDrain_.end());
  attachment.cq_.reserved -= attachment.entries_;
  --attachments_;
  if (attachment.cq_.reserved == 0 && cqs_.size() > 1) trimTurn_.schedule();
  owner_.onDetached();
}

CompletionDispatcher::~CompletionDispatcher() { releaseVerbs(); }

void CompletionDispatcher::stop() noexcept {
  if (removed_) return;
  removed_ = true;
  for (CompletionHandler* handler : handlersWhere([](const Attachment&) { return true; }))
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
  for (auto& cq : cqs_) cq->queued = false;
}

void CompletionDispatcher::releaseVerbs() noexcept {
  if (event_ != nullptr) event_free(event_);
  event_ = nullptr;
  dropPendingWork();
  byQpNum_.clear();
  lastAttachment_ = nullptr;
  srqs_.clear();
  cqs_.clear();  // each acks its events first
  channel_.reset();
}

int CompletionDispatcher::init() noexcept {
  errno = 0;
  channel_.reset(ibv_create_comp_channel(context_));
  if (!channel_) return errno ? -errno : -ENOMEM;
  if (int rc = setNonBlocking(channel_->fd); rc != 0) return rc;
  event_ = event_new(reactor_.base(), channel_->fd, EV_READ | EV_PERSIST, &CompletionDispatcher::onReadable, this);
  if (event_ == nullptr || event_add(event_, nullptr) != 0) return -ENOMEM;
  if (resume_.init(reactor_.base(), &CompletionDispatcher::onReadable, this) != 0) return -ENOMEM;
  if (polling_.init(reactor_.base()) != 0) return -ENOMEM;
  if (trimTurn_.init(reactor_.base(), &CompletionDispatcher::onTrimTurn, this) != 0) return -ENOMEM;
  return 0;
}

CompletionHandler* CompletionDispatcher::handlerOfQp(uint32_t qpNum) noexcept {
  Attachment* attachment = attachmentOf(qpNum);
  return attachment != nullptr ? attachment->handler_ : nullptr;
}

std::vector<CompletionHandler*> CompletionDispatcher::handlersOfCq(const ibv_cq* cq) const {
  return handlersWhere([cq](const Attachment& a) { return a.cq_.cq.get() == cq; });
}

std::vector<CompletionHandler*> CompletionDispatcher::handlersReceivingThrough(const ibv_srq* srq) const {
  return handlersWhere([srq](const Attachment& a) { return a.srq_ != nullptr && a.srq_->get() == srq; });
}

std::unique_ptr<CompletionDispatcher::Attachment> CompletionDispatcher::attach(uint32_t entries,
                                                                               CompletionHandler* handler, int& error) {
  error = 0;
  if (removed_) {
    error = -ENODEV;
    return nullptr;
  }
  if (entries == 0 || entries > static_cast<uint32_t>(maxCqe_)) {
    error = -EINVAL;
    return nullptr;
  }
  SharedCq* chosen = nullptr;
  for (auto& cq : cqs_) {
    if (cq->capacity - cq->reserved >= entries) {
      chosen = cq.get();
      break;
    }
  }
  if (chosen == nullptr) {
    auto cq = std::make_unique<SharedCq>();
    cq->capacity = std::min(std::max(kSharedCqEntries, entries), static_cast<uint32_t>(maxCqe_));
    cq->cq = CompletionQueue::create(context_, static_cast<int>(cq->capacity), channel_.get(), cq.get(), error);
    if (!cq->cq) return nullptr;
    if (int rc = ibv_req_notify_cq(cq->cq.get(), 0); rc != 0) {
      error = -rc;
      return nullptr;
    }
    chosen = cq.get();
    detail::AsyncEventRouter::instance().ownCq(cq->cq.get(), &inbox_);
    cqs_.push_back(std::move(cq));
    ++stats_.sharedCqsCreated;
  }
  chosen->reserved += entries;
  ++attachments_;
  return std::unique_ptr<Attachment>(new Attachment(*this, *chosen, entries, takeSerial(), handler));
}

void CompletionDispatcher::serveAll(SharedCq& cq) noexcept {
  int handled = 0;
  delivering_ = true;
  (void)serve(cq, static_cast<int>(cq.capacity), handled);
  delivering_ = false;
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
  bool spareKept = false;
  for (size_t i = 0; i < cqs_.size();) {
    SharedCq& cq = *cqs_[i];
    if (cq.reserved != 0 || !spareKept) {
      spareKept = spareKept || cq.reserved == 0;
      ++i;
      continue;
    }
    // No QP uses it (a connection's QP is destroyed before it detaches); an event of it still
    // unread on the channel goes with it (the kernel drops a destroyed CQ's pending events). What
    // it still holds is drained first: a receive through a shared receive queue goes back to it.
    serveAll(cq);
    if (cq.queued) ready_.remove(&cq);
    detail::AsyncEventRouter::instance().disownCq(cq.cq.get());
    if (int rc = cq.cq.reset(); rc != 0)
      EVRDMA_LOG(LogLevel::Warn, "%s: destroying an idle shared CQ failed (%s)", deviceName(), strerror(-rc));
    cqs_.erase(cqs_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.sharedCqsReleased;
  }
  if (firstToPoll_ >= cqs_.size()) firstToPoll_ = 0;
}

void CompletionDispatcher::onReadable(int, short, void* self) noexcept {
  static_cast<CompletionDispatcher*>(self)->run();
}

void CompletionDispatcher::deliver(const ibv_wc& wc) noexcept {
  const uint32_t serial = detail::wrid::serial(wc.wr_id);
  Attachment* attachment = attachmentOf(wc.qp_num);
  if (!detail::wrid::isSend(wc.wr_id) && !srqs_.empty()) {
    if (detail::SharedReceiveQueue* srq = sharedReceiveQueueWithSerial(serial)) {
      srq->onConsumed();
      if (attachment != nullptr && attachment->srq_ == srq) {
        handOver(attachment->handler_, wc);  // the connection gives the buffer back
      } else {
        ++stats_.strayCompletions;
        srq->takeBackStray(wc);
      }
      return;
    }
  }
  if (attachment == nullptr || serial != attachment->serial_) {
    ++stats_.strayCompletions;
    EVRDMA_LOG(LogLevel::Info, "%s: a completion (%s, status %s) for QP %u, no longer attached: dropped", deviceName(),
               detail::wrid::isSend(wc.wr_id) ? "send" : "receive", ibv_wc_status_str(wc.status), wc.qp_num);
    return;
  }
  handOver(attachment->handler_, wc);
}

CompletionDispatcher::Attachment* CompletionDispatcher::attachmentOf(uint32_t qpNum) noexcept {
  if (lastAttachment_ != nullptr && lastAttachment_->qpNum_ == qpNum) return lastAttachment_;
  auto it = byQpNum_.find(qpNum);
  if (it == byQpNum_.end()) return nullptr;
  lastAttachment_ = it->second;
  return lastAttachment_;
}

void CompletionDispatcher::handOver(CompletionHandler* handler, const ibv_wc& wc) noexcept {
  // Mostly the handler of the completion before (a poll's completions are mostly one QP's).
  if (inPoll_.empty() || (inPoll_.back() != handler && std::find(inPoll_.begin(), inPoll_.end(), handler) == inPoll_.end())) {
    inPoll_.push_back(handler);  // cleared, not freed, after each poll: no allocation once warm
    handler->onPollBegin(pollReceives_);
  }
  handler->onCompletion(wc);
}

void CompletionDispatcher::endPoll() noexcept {
  // Handlers are destroyed only on a later turn (connections defer it), so each is still here.
  for (size_t i = 0; i < inPoll_.size(); ++i) inPoll_[i]->onPollEnd();
  inPoll_.clear();
}

detail::SharedReceiveQueue* CompletionDispatcher::sharedReceiveQueueWithSerial(uint32_t serial) const noexcept {
  for (const auto& srq : srqs_)
    if (srq->serial() == serial) return srq;
  return nullptr;
}

uint32_t CompletionDispatcher::takeSerial() noexcept {
  const uint32_t serial = nextSerial_;
  nextSerial_ = nextSerial_ == detail::wrid::kSerialMask ? 1 : nextSerial_ + 1;
  return serial;
}

void CompletionDispatcher::reportCqError(SharedCq& cq, int err, const char* op) noexcept {
  for (CompletionHandler* handler : handlersWhere([&cq](const Attachment& a) { return &a.cq_ == &cq; }))
    handler->onCompletionQueueError(err, op);
}

bool CompletionDispatcher::serve(SharedCq& cq, int budget, int& handled) noexcept {
  ibv_wc wcs[CompletionStats::kBatch];
  for (;;) {
    if (handled >= budget) return false;
    int n = ibv_poll_cq(cq.cq.get(), CompletionStats::kBatch, wcs);
    ++stats_.polls;
    if (n < 0) {
      ++stats_.pollFailures;
      EVRDMA_LOG(LogLevel::Error, "%s: ibv_poll_cq failed (%d): its connections fail", deviceName(), n);
      reportCqError(cq, n, "ibv_poll_cq");
      return true;  // nothing more to hand out from it
    }
    ++stats_.perPoll[n];
    if (n == 0 && cq.firstPoll) ++stats_.emptyFirstPolls;
    cq.firstPoll = false;
    if (n == 0) return true;
    stats_.completions += n;
    cq.handedOut += static_cast<uint64_t>(n);
    handled += n;
    turnBudget_.afterPoll(handled);
    pollReceives_ = 0;
    for (int i = 0; i < n; ++i) pollReceives_ += detail::wrid::isSend(wcs[i].wr_id) ? 0 : 1;
    if (handOverAllToOne(wcs, n)) continue;
    for (int i = 0; i < n; ++i) deliver(wcs[i]);
    endPoll();
  }
}

bool CompletionDispatcher::handOverAllToOne(const ibv_wc* wcs, int n) noexcept {
  if (!srqs_.empty() || !inPoll_.empty()) return false;
  const Attachment* one = attachmentOf(wcs[0].qp_num);
  if (one == nullptr) return false;
  for (int i = 0; i < n; ++i)
    if (wcs[i].qp_num != one->qpNum_ || detail::wrid::serial(wcs[i].wr_id) != one->serial_) return false;
  // Its handler is destroyed only on a later turn (connections defer it), whatever its callbacks do.
  CompletionHandler* handler = one->handler_;
  ++stats_.pollsForOneConnection;
  handler->onPoll(wcs, n, pollReceives_);
  return true;
}

void CompletionDispatcher::run() noexcept {
  if (delivering_) return;  // an application callback ran a nested loop: the outer pass goes on
  int handled = 0;
  turnBudget_.beginPass(reactor_.turnBudget());
  const int budget = passBudget();
  // Polling adaptively, a CQ is armed only when a window passes with nothing (AdaptivePolling).
  const bool adaptive = reactor_.pollingWindow().count() > 0;
  // Woken in event mode, hand out what the CQs hold before reading the channel: the read(2) and
  // the arm then come after the answers' posts, off the path from wake-up to answer. The event
  // read below still arms each CQ that raised one, and the poll after the arm closes the race.
  if (!adaptive && ready_.empty() && !removed_ && !pollAll(handled, budget)) {
    turnBudget_.endPass(handled);
    yieldBudget();
    return;
  }
  ibv_cq* eventCq = nullptr;
  void* eventContext = nullptr;
  // At most one event can be pending per CQ on the channel (armIfNeeded arms a CQ again only after
  // its event was read), so once as many are read the channel is empty: no read(2) only to be told
  // EAGAIN, a system call per wake-up. The fd is level-triggered: anything left wakes the next turn.
  const size_t mostPending = std::max<size_t>(1, cqs_.size());
  for (size_t read = 0; read < mostPending; ++read) {
    if (ibv_get_cq_event(channel_.get(), &eventCq, &eventContext) != 0) {
      if (errno != EAGAIN && errno != EINTR) {  // the device is gone: the channel stays in error
        owner_.onChannelFailed();
        return;
      }
      break;
    }
    auto* cq = static_cast<SharedCq*>(eventContext);
    ++stats_.events;
    cq->cq.noteEvent();
    cq->needsArm = true;
    cq->firstPoll = !cq->foundBeforeRead;  // "empty first polls" count wake-ups that found nothing
    cq->foundBeforeRead = false;
    if (!cq->queued) {
      cq->queued = true;
      ready_.push_back(cq);
    }
  }

  delivering_ = true;
  // Sweeps over the CQs that are ready, each served up to its share of what is left of the turn's
  // budget (shareOf), as long as budget is left: what one CQ holds beyond its share waits at the
  // back of the line, not for a whole round of the others behind a CQ that took the budget. A CQ
  // left undrained spent at least one poll's worth, so every sweep makes progress.
  while (!ready_.empty() && handled < budget && !removed_) {
    const int share = shareOf(budget - handled, ready_.size());
    for (size_t sweep = ready_.size(); sweep > 0 && handled < budget; --sweep) {
      SharedCq* cq = ready_.front();
      const int limit = std::min(budget, handled + share);
      // Drain, arm, then poll once more (the notify race: what landed before the arm raises no
      // event). Arming after the first drain keeps its system call off the path from the wake-up
      // to the answers' posts, and the window in which a completion is both polled and announced
      // (a later wake-up that finds nothing) is the second poll only, not the whole delivery.
      const uint64_t pollFailures = stats_.pollFailures;
      bool drained = serve(*cq, limit, handled);
      if (drained && !adaptive && cq->needsArm && stats_.pollFailures == pollFailures) {
        armIfNeeded(*cq);
        drained = serve(*cq, limit, handled);
      }
      ready_.pop_front();
      if (drained)
        cq->queued = false;
      else
        ready_.push_back(cq);  // its share spent: behind the others
    }
  }
  turnBudget_.endPass(handled);
  if (!ready_.empty()) yieldBudget();  // the budget is spent: the rest on a later turn
  delivering_ = false;
  if (!awaitingDrain_.empty()) callDrained(false);
  if (adaptive && !removed_) polling_.start();
}

int CompletionDispatcher::shareOf(int budget, size_t cqs) noexcept {
  // At least one poll's worth, so a pass over many CQs still moves each one it reaches.
  return std::max<int>(CompletionStats::kBatch, budget / static_cast<int>(std::max<size_t>(1, cqs)));
}

int CompletionDispatcher::passBudget() const noexcept {
  // Every CQ may have one poll's worth in a turn, however short the time budget makes it.
  return std::max(turnBudget_.completions(), CompletionStats::kBatch * static_cast<int>(std::max<size_t>(1, cqs_.size())));
}

bool CompletionDispatcher::pollAll(int& handled, int budget) noexcept {
  delivering_ = true;
  // Every CQ gets an equal share of the turn's budget. With the whole budget for whichever CQ came
  // first, a loop with more work than one turn's budget served one CQ per turn, and what a CQ held
  // past the budget waited a whole round of the others: 64 connections with 16 messages in flight
  // each, on 8 CQs, saw echoes wait twice the mean. A pass that cannot finish (a share spent, or the
  // budget before the last CQ) starts the next one a CQ further on, so the order rotates. By index,
  // over the CQs there were when the pass began: a callback may attach a connection and so add a
  // CQ (served from the next pass on).
  const size_t count = cqs_.size();
  if (count == 1) {
    // One CQ (up to 16 connections): it has the whole budget, and there is no order to rotate.
    // Adaptive polling comes here on every poll, mostly to find nothing: no division, no sweep.
    SharedCq& cq = *cqs_[0];
    const int before = handled;
    const bool drained = handled < budget && !removed_ && serve(cq, budget, handled);
    cq.foundBeforeRead = handled > before;
    delivering_ = false;
    return drained;
  }
  const size_t first = count > 0 ? firstToPoll_ % count : 0;
  for (size_t i = 0; i < count; ++i) cqs_[i]->foundBeforeRead = false;
  bool drained = false;
  // Passes while budget is left: a CQ left undrained spent at least one poll's worth.
  while (!drained && handled < budget && !removed_) {
    const int share = shareOf(budget - handled, count);
    drained = true;
    for (size_t k = 0; k < count && !removed_; ++k) {
      if (handled >= budget) {
        drained = false;
        break;
      }
      SharedCq& cq = *cqs_[(first + k) % count];
      const int before = handled;
      if (!serve(cq, std::min(budget, handled + share), handled)) drained = false;
      if (handled > before) cq.foundBeforeRead = true;
    }
  }
  if (!drained) firstToPoll_ = first + 1;
  delivering_ = false;
  return drained;
}

void CompletionDispatcher::yieldBudget() noexcept {
  ++stats_.budgetYields;
  EVRDMA_LOG(LogLevel::Debug, "%s: completion budget of one turn spent, the rest on a later turn", deviceName());
  resume_.schedule();
}

void CompletionDispatcher::armIfNeeded(SharedCq& cq) noexcept {
  if (!cq.needsArm) return;
  cq.needsArm = false;
  if (int rc = ibv_req_notify_cq(cq.cq.get(), 0); rc != 0) {
    ++stats_.notifyFailures;
    EVRDMA_LOG(LogLevel::Error, "%s: ibv_req_notify_cq failed (%s): its connections fail", deviceName(), strerror(rc));
    reportCqError(cq, -rc, "ibv_req_notify_cq");
  }
}

int CompletionDispatcher::pollEveryCq() noexcept {
  int handled = 0;
  turnBudget_.beginPass(reactor_.turnBudget());
  (void)pollAll(handled, passBudget());
  turnBudget_.endPass(handled);
  return handled;
}

void CompletionDispatcher::armEveryCq() noexcept {
  for (size_t i = 0; i < cqs_.size(); ++i) armIfNeeded(*cqs_[i]);
}

}  // namespace evrdma
