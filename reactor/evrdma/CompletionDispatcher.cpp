#include "evrdma/CompletionDispatcher.h"

#include <event2/event.h>

#include <algorithm>
#include <cerrno>

#include "evrdma/Reactor.h"

namespace evrdma {

CompletionDispatcher::Cq::~Cq() {
  owner_.forget(this);
  cq_.reset();  // flushes the unacked event count first
}

CompletionDispatcher::~CompletionDispatcher() {
  if (event_ != nullptr) event_free(event_);
}

int CompletionDispatcher::init() noexcept {
  errno = 0;
  channel_.reset(ibv_create_comp_channel(context_));
  if (!channel_) return errno ? -errno : -ENOMEM;
  if (int rc = setNonBlocking(channel_->fd); rc != 0) return rc;
  event_ = event_new(reactor_.base(), channel_->fd, EV_READ | EV_PERSIST, &CompletionDispatcher::onReadable, this);
  if (event_ == nullptr || event_add(event_, nullptr) != 0) return -ENOMEM;
  return 0;
}

std::unique_ptr<CompletionDispatcher::Cq> CompletionDispatcher::createCq(int depth, CompletionHandler* handler,
                                                                          int& error) {
  std::unique_ptr<Cq> cq(new Cq(*this));
  cq->handler_ = handler;
  cq->cq_ = CompletionQueue::create(context_, depth, channel_.get(), cq.get(), error);
  if (!cq->cq_) return nullptr;
  if (int rc = ibv_req_notify_cq(cq->cq_.get(), 0); rc != 0) {
    error = -rc;
    return nullptr;
  }
  return cq;
}

void CompletionDispatcher::forget(Cq* cq) noexcept {
  if (cq->queued_) ready_.erase(std::remove(ready_.begin(), ready_.end(), cq), ready_.end());
}

void CompletionDispatcher::onReadable(int, short, void* self) noexcept {
  static_cast<CompletionDispatcher*>(self)->run();
}

void CompletionDispatcher::run() noexcept {
  ibv_cq* eventCq = nullptr;
  void* eventContext = nullptr;
  while (ibv_get_cq_event(channel_.get(), &eventCq, &eventContext) == 0) {
    auto* cq = static_cast<Cq*>(eventContext);
    ++stats_.events;
    cq->cq_.noteEvent();
    cq->needsArm_ = true;
    cq->firstPoll_ = true;
    if (!cq->queued_) {
      cq->queued_ = true;
      ready_.push_back(cq);
    }
  }

  int handled = 0;
  ibv_wc wcs[CompletionStats::kBatch];
  while (!ready_.empty()) {
    Cq* cq = ready_.front();
    if (cq->needsArm_) {
      cq->needsArm_ = false;
      ibv_req_notify_cq(cq->cq_.get(), 0);  // arm before polling: the notify race
    }
    for (;;) {
      if (handled >= kBudget) {
        ++stats_.budgetYields;
        event_active(event_, EV_READ, 0);  // the rest next turn; cq stays at the front
        return;
      }
      int n = ibv_poll_cq(cq->cq_.get(), CompletionStats::kBatch, wcs);
      if (n < 0) n = 0;  // a provider error: nothing to hand out; the next event retries
      ++stats_.polls;
      ++stats_.perPoll[n];
      if (n == 0 && cq->firstPoll_) ++stats_.emptyFirstPolls;
      cq->firstPoll_ = false;
      if (n == 0) break;
      stats_.completions += n;
      handled += n;
      for (int i = 0; i < n; ++i)
        if (cq->handler_ != nullptr) cq->handler_->onCompletion(wcs[i]);
    }
    cq->queued_ = false;
    ready_.pop_front();
  }
}

}  // namespace evrdma
