// CompletionDispatcher's polling pass: the channel's events read, each CQ armed and polled within
// its share of the turn's budget, and each completion handed to the handler of its QP.
#include <event2/event.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "CompletionDispatcher.h"
#include "Logging.h"
#include "WorkRequestId.h"

namespace evrdma {

void CompletionDispatcher::serveAll(SharedCq& cq) noexcept {
  int handled = 0;
  delivering_ = true;
  (void)serve(cq, static_cast<int>(cq.capacity), handled, true);
  delivering_ = false;
}

void CompletionDispatcher::onReadable(int, short, void* self) noexcept {
  static_cast<CompletionDispatcher*>(self)->run();
}

void CompletionDispatcher::deliver(const ibv_wc& wc) noexcept {
  const uint32_t serial = detail::wrid::serial(wc.wr_id);
  detail::CqReservation* attachment = pool_.boundTo(wc.qp_num);
  if (!detail::wrid::isSend(wc.wr_id) && pool_.hasSharedReceiveQueues()) {
    if (detail::SharedReceiveQueue* srq = pool_.sharedReceiveQueueWithSerial(serial)) {
      srq->onConsumed();
      if (attachment != nullptr && attachment->srq == srq) {
        handOver(attachment->handler, wc);  // the connection gives the buffer back
      } else {
        ++stats_.strayCompletions;
        srq->takeBackStray(wc);
      }
      return;
    }
  }
  if (attachment == nullptr || serial != attachment->serial) {
    ++stats_.strayCompletions;
    EVRDMA_LOG(LogLevel::Info, "%s: a completion (%s, status %s) for QP %u, no longer attached: dropped", deviceName(),
               detail::wrid::isSend(wc.wr_id) ? "send" : "receive", ibv_wc_status_str(wc.status), wc.qp_num);
    return;
  }
  handOver(attachment->handler, wc);
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

void CompletionDispatcher::reportCqError(SharedCq& cq, int err, const char* op) noexcept {
  for (CompletionHandler* handler : pool_.handlersWhere([&cq](const detail::CqReservation& r) { return r.cq == &cq; }))
    handler->onCompletionQueueError(err, op);
}

bool CompletionDispatcher::serve(SharedCq& cq, int budget, int& handled, bool untilEmpty) noexcept {
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
    noteRecent(cq);
    handled += n;
    turnBudget_.afterPoll(handled);
    pollReceives_ = 0;
    for (int i = 0; i < n; ++i) pollReceives_ += detail::wrid::isSend(wcs[i].wr_id) ? 0 : 1;
    if (!handOverAllToOne(wcs, n)) {
      for (int i = 0; i < n; ++i) deliver(wcs[i]);
      endPoll();
    }
    // Fewer than a poll's worth: the CQ was empty when polled. In event mode what landed since is
    // found by the poll that follows every arm (or raises the next event): polled again now, it
    // mostly found nothing (a stream ping-pong's round trip paid that poll, ~60 instructions).
    // Polling adaptively (untilEmpty), the poll after this one would be a whole pass of the
    // polling loop: pingpong -P paid ~110 more a round trip for it.
    if (n < CompletionStats::kBatch && !untilEmpty) return true;
  }
}

bool CompletionDispatcher::handOverAllToOne(const ibv_wc* wcs, int n) noexcept {
  if (pool_.hasSharedReceiveQueues() || !inPoll_.empty()) return false;
  const detail::CqReservation* one = pool_.boundTo(wcs[0].qp_num);
  if (one == nullptr) return false;
  for (int i = 0; i < n; ++i)
    if (wcs[i].qp_num != one->qpNum || detail::wrid::serial(wcs[i].wr_id) != one->serial) return false;
  // Its handler is destroyed only on a later turn (connections defer it), whatever its callbacks do.
  CompletionHandler* handler = one->handler;
  ++stats_.pollsForOneConnection;
  handler->onPoll(wcs, n, pollReceives_);
  return true;
}

void CompletionDispatcher::run() noexcept {
  if (delivering_) return;  // an application callback ran a nested loop: the outer pass goes on
  int handled = 0;
  turnBudget_.beginPass(settings_.turnBudget);
  const int budget = passBudget();
  // Polling adaptively, a CQ is armed only when a window passes with nothing (AdaptivePolling).
  const bool adaptive = settings_.window.count() > 0;
  // Woken in event mode, hand out what the busy CQs hold before reading the channel: the read(2)
  // and the arm then come after the answers' posts, off the path from wake-up to answer. The event
  // read below still arms each CQ that raised one, and the poll after the arm closes the race.
  const bool pollFirst = !adaptive && ready_.empty() && !removed_;
  if (pollFirst && !pollRecent(handled, budget)) {
    // The budget is spent: the CQs that raised events wait in the ready line for the next pass
    // (an idle CQ is found only by its event).
    if (!readEvents()) return;
    turnBudget_.endPass(handled);
    yieldBudget();
    return;
  }
  if (!readEvents()) return;

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
      // After the poll before the read (pollFirst), a CQ with an arm due is armed at once: polled
      // again first, it could only hold what landed since or what that poll left (it polled the
      // busy CQs only, each up to a share), which the poll after the arm finds as well (a
      // ping-pong's round trip saved a poll, ~80 instructions).
      bool drained = (pollFirst && cq->needsArm) || serve(*cq, limit, handled, adaptive);
      if (drained && !adaptive && cq->needsArm && stats_.pollFailures == pollFailures) {
        armIfNeeded(*cq);
        drained = serve(*cq, limit, handled, adaptive);
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
  return std::max(turnBudget_.completions(), CompletionStats::kBatch * static_cast<int>(std::max<size_t>(1, pool_.size())));
}

bool CompletionDispatcher::readEvents() noexcept {
  ibv_cq* eventCq = nullptr;
  void* eventContext = nullptr;
  // At most one event can be pending per CQ on the channel (armIfNeeded arms a CQ again only after
  // its event was read), so once as many are read the channel is empty: no read(2) only to be told
  // EAGAIN, a system call per wake-up. The fd is level-triggered: anything left wakes the next turn.
  const size_t mostPending = std::max<size_t>(1, pool_.size());
  for (size_t read = 0; read < mostPending; ++read) {
    if (ibv_get_cq_event(channel_.get(), &eventCq, &eventContext) != 0) {
      if (errno != EAGAIN && errno != EINTR) {  // the device is gone: the channel stays in error
        owner_.onChannelFailed();
        return false;
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
  return true;
}

bool CompletionDispatcher::pollRecent(int& handled, int budget) noexcept {
  if (pool_.size() == 1) return pollAll(handled, budget, false);
  // Only the CQs that handed out completions since the last such poll: with the ready line empty
  // every CQ is armed, so what lands on any other raises an event, read next. Each takes at most
  // its share as if every CQ were served, so CQs found by their events still get theirs this turn.
  recentPass_.swap(recent_);
  for (SharedCq* cq : recentPass_) {
    cq->recent = false;
    cq->foundBeforeRead = false;
  }
  const int share = shareOf(budget - handled, pool_.size());
  delivering_ = true;
  for (size_t k = 0; k < recentPass_.size() && handled < budget && !removed_; ++k) {
    SharedCq& cq = *recentPass_[k];
    const int before = handled;
    (void)serve(cq, std::min(budget, handled + share), handled, false);  // what it holds past its share: by its event
    if (handled > before) cq.foundBeforeRead = true;
  }
  delivering_ = false;
  recentPass_.clear();
  return handled < budget;
}

bool CompletionDispatcher::pollAll(int& handled, int budget, bool untilEmpty) noexcept {
  delivering_ = true;
  // Every CQ gets an equal share of the turn's budget. With the whole budget for whichever CQ came
  // first, a loop with more work than one turn's budget served one CQ per turn, and what a CQ held
  // past the budget waited a whole round of the others: 64 connections with 16 messages in flight
  // each, on 8 CQs, saw echoes wait twice the mean. A pass that cannot finish (a share spent, or the
  // budget before the last CQ) starts the next one a CQ further on, so the order rotates. By index,
  // over the CQs there were when the pass began: a callback may attach a connection and so add a
  // CQ (served from the next pass on).
  const size_t count = pool_.size();
  if (count == 1) {
    // One CQ (up to 16 connections): it has the whole budget, and there is no order to rotate.
    // Adaptive polling comes here on every poll, mostly to find nothing: no division, no sweep.
    SharedCq& cq = pool_[0];
    const int before = handled;
    const bool drained = handled < budget && !removed_ && serve(cq, budget, handled, untilEmpty);
    cq.foundBeforeRead = handled > before;
    delivering_ = false;
    return drained;
  }
  const size_t first = count > 0 ? firstToPoll_ % count : 0;
  for (size_t i = 0; i < count; ++i) pool_[i].foundBeforeRead = false;
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
      SharedCq& cq = pool_[(first + k) % count];
      const int before = handled;
      if (!serve(cq, std::min(budget, handled + share), handled, untilEmpty)) drained = false;
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
  turnBudget_.beginPass(settings_.turnBudget);
  (void)pollAll(handled, passBudget(), true);
  turnBudget_.endPass(handled);
  return handled;
}

void CompletionDispatcher::armEveryCq() noexcept {
  for (size_t i = 0; i < pool_.size(); ++i) armIfNeeded(pool_[i]);
}

}  // namespace evrdma
