// CompletionDispatcher: one non-blocking completion channel per device, watched by the reactor,
// and the polling passes that hand the completions of its SharedCqPool out to their handlers.
//
// On readiness: every completion event is taken (ibv_get_cq_event until EAGAIN; acks batched per
// CQ and flushed before the CQ is destroyed), each CQ that had an event is re-armed, and only then
// polled until empty: a completion landing between the last poll and the arm still raises an
// event. At most a turn's budget of completions is handed out per turn (TurnBudget: as many as
// fit in the turn budget, at most kBudget, at least a poll's worth per CQ), shared equally
// by the CQs a pass serves; what a CQ holds past its share waits for a later turn, after the loop
// has polled its other sources and timers, with that CQ at the back of the ready list, so one busy
// CQ cannot starve the others. The same holds for adaptive polling's spins over every CQ: a pass
// that could not finish makes the next one start a CQ further on. Event mode's poll before the
// channel's read polls only the CQs that handed out completions since the last one (each up to
// its share as if all were served): every other CQ is armed and raises an event for what lands on
// it, so a wake-up costs what the busy CQs hold, not a poll of every CQ of a server holding
// thousands of idle connections. The polling window and the turn budget are the Reactor's
// PollingSettings, handed down when the dispatcher is made.
//
// It routes completions and nothing else: the device's protection domain, buffers, SRQs, async
// events and removal are its Device's, which it tells when its channel fails and when a
// connection detaches (Owner).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "AdaptivePolling.h"
#include "AsyncEventRouter.h"
#include "CompletionHandler.h"
#include "NextTurn.h"
#include "PollingSettings.h"
#include "Ring.h"
#include "SharedCqPool.h"
#include "TurnBudget.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/Verbs.h"

struct event;
struct event_base;

namespace evrdma {

class CompletionDispatcher final : private detail::AdaptivePolling::Source {
 public:
  // What the dispatcher tells the Device it belongs to.
  class Owner {
   public:
    // The completion channel failed: the device is gone.
    virtual void onChannelFailed() noexcept = 0;
    // A connection let go of its reservation (the last one, perhaps, of a removed device).
    virtual void onDetached() noexcept = 0;

   protected:
    ~Owner() = default;
  };

  static constexpr int kBudget = detail::TurnBudget::kMost;  // the most one turn hands out
  static constexpr uint32_t kSharedCqEntries = detail::SharedCqPool::kSharedCqEntries;

  // A reservation on a shared CQ for one QP. Destroy it only outside its handler's callbacks
  // (connections destroy theirs deferred), after the QP is gone.
  class Attachment {
   public:
    ~Attachment();
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;
    ibv_cq* cq() const noexcept { return reservation_.cq->cq.get(); }
    uint32_t serial() const noexcept { return reservation_.serial; }
    // Routes the completions of `qpNum` to the handler; call once the QP exists.
    void bind(uint32_t qpNum) noexcept { owner_.pool_.bind(reservation_, qpNum); }
    // The QP receives through `srq`: its receive completions carry the SRQ's serial.
    void receiveThrough(detail::SharedReceiveQueue* srq) noexcept { reservation_.srq = srq; }
    // Calls `then` once the dispatcher has handed out everything the CQ holds now (for every QP
    // on it, in order), from its own pass on a later turn, never from inside this call: a CM event
    // such as DISCONNECTED may be read before the completions that preceded it. That is once a
    // pass found the CQ empty, or handed out as many of its completions as it can hold (a CQ that
    // other connections keep busy may never be empty). Called once the device is going too (at
    // once if it is gone). A second call replaces the first.
    void whenDrained(std::function<void()> then);

   private:
    friend class CompletionDispatcher;
    Attachment(CompletionDispatcher& owner, detail::SharedCq& cq, uint32_t entries, uint32_t serial,
               CompletionHandler* handler)
        : owner_(owner), reservation_{&cq, entries, serial, handler} {}
    detail::SharedCq& sharedCq() const noexcept { return *reservation_.cq; }
    CompletionDispatcher& owner_;
    detail::CqReservation reservation_;
    std::function<void()> whenDrained_;
    uint64_t drainedAt_ = 0;  // whenDrained: the CQ's handedOut count by which it holds nothing older
  };

  // Counts into `stats`, which the Reactor keeps after this dispatcher is gone. `inbox` is the
  // Device's, where another Reactor hands the async events of this dispatcher's QPs and CQs.
  // `settings` are the Reactor's, read at each pass (it outlives its devices).
  CompletionDispatcher(event_base* base, const detail::PollingSettings& settings, ibv_context* context, int maxCqe,
                       CompletionStats& stats, detail::AsyncInbox& inbox, Owner& owner)
      : base_(base),
        settings_(settings),
        context_(context),
        owner_(owner),
        polling_(settings, stats, *this),
        pool_(context, maxCqe, stats, inbox),
        stats_(stats) {}
  ~CompletionDispatcher();
  CompletionDispatcher(const CompletionDispatcher&) = delete;
  CompletionDispatcher& operator=(const CompletionDispatcher&) = delete;

  // Creates the channel and starts watching it. Returns 0 or -errno.
  int init() noexcept;

  // Reserves `entries` CQ entries for one QP whose completions go to `handler`. Null + -errno.
  std::unique_ptr<Attachment> attach(uint32_t entries, CompletionHandler* handler, int& error);
  size_t attachments() const noexcept { return pool_.reservations(); }
  // Receive completions that carry `srq`'s serial come from it: the buffer goes back to it when
  // its QP is gone. The SRQ outlives every QP receiving through it (forgetSharedReceiveQueues).
  void routeReceivesOf(detail::SharedReceiveQueue* srq) { pool_.routeReceivesOf(srq); }
  void forgetSharedReceiveQueues() noexcept { pool_.forgetSharedReceiveQueues(); }
  uint32_t takeSerial() noexcept { return pool_.takeSerial(); }  // for an SRQ, as an attachment's
  // Whom an async event concerns: the handler bound to a QP, those on a CQ, those receiving
  // through an SRQ.
  CompletionHandler* handlerOfQp(uint32_t qpNum) noexcept;
  std::vector<CompletionHandler*> handlersOfCq(const ibv_cq* cq) const;
  std::vector<CompletionHandler*> handlersReceivingThrough(const ibv_srq* srq) const;

  ibv_context* context() const noexcept { return context_; }
  const char* deviceName() const noexcept { return nameOf(context_); }
  // A device's name for the log ("?" when it has none), for the dispatcher and its Device.
  static const char* nameOf(const ibv_context* context) noexcept {
    return context != nullptr && context->device != nullptr ? ibv_get_device_name(context->device) : "?";
  }
  // The device is going away: every attached handler hears onDeviceRemoved, the channel leaves
  // the loop (a removed device's fd stays readable: the loop would spin) and no new attachment is
  // accepted (-ENODEV).
  void stop() noexcept;
  // The CQs, then the channel (Device::releaseVerbs, once no connection is attached).
  void releaseVerbs() noexcept;
  bool delivering() const noexcept { return delivering_; }
  // For the Reactor's linger (ReactorCore::lingerStreams), which serves the CQs without the loop: the
  // channel's fd, and one pass as on readiness (it polls the busy CQs first).
  int channelFd() const noexcept { return channel_ ? channel_->fd : -1; }
  void serveNow() noexcept { run(); }
  const CompletionStats& stats() const noexcept { return stats_; }
  size_t sharedCqCount() const noexcept { return pool_.size(); }

 private:
  using SharedCq = detail::SharedCq;

  // The polling pass (CompletionPass.cpp).
  static void onReadable(int, short, void* self) noexcept;
  void run() noexcept;
  // AdaptivePolling::Source: what the polling turns of Reactor::setPollingWindow do.
  int pollEveryCq() noexcept override;
  void armEveryCq() noexcept override;
  bool mayPoll() const noexcept override { return !delivering_ && !removed_; }
  // Polls every CQ once, adding the completions handled to `handled`, and notes in each CQ whether
  // it held any (foundBeforeRead), each up to its share of the budget, again while budget is left.
  // False if the budget was spent before every CQ was drained; the next call then starts a CQ
  // further on, so every CQ gets its turn at the front. `untilEmpty`: as serve's.
  bool pollAll(int& handled, int budget, bool untilEmpty) noexcept;
  // Event mode's poll before the channel's read: one poll's worth or more (a share of `budget` as
  // if every CQ were served) from each CQ that handed out completions since the last such poll,
  // noted in foundBeforeRead; with one CQ, pollAll. False if the budget was spent.
  bool pollRecent(int& handled, int budget) noexcept;
  // Takes the channel's events: each CQ that raised one is to be armed and joins the ready line.
  // False if the channel failed (the device is gone: the owner was told).
  bool readEvents() noexcept;
  // A CQ handed out completions: it is polled before the next read.
  void noteRecent(SharedCq& cq) {
    if (cq.recent) return;
    cq.recent = true;
    recent_.push_back(&cq);
  }
  // The completions this pass may hand out: the turn budget's, or a poll's worth per CQ if more.
  int passBudget() const noexcept;
  // What each of `cqs` CQs may take of `budget` completions in one pass.
  static int shareOf(int budget, size_t cqs) noexcept;
  // The turn's completion budget is spent: the rest is served on a later turn.
  void yieldBudget() noexcept;
  // Arms `cq` if an event was taken from it since it was last armed; a failure fails its connections.
  void armIfNeeded(SharedCq& cq) noexcept;
  // Polls one CQ until a poll finds it empty (fewer than a poll's worth; with `untilEmpty`, none)
  // or `budget` completions were handled; adds them to `handled`. Returns false if the CQ may
  // hold more (budget spent) or failed.
  bool serve(SharedCq& cq, int budget, int& handled, bool untilEmpty) noexcept;
  // Everything `cq` holds, outside a pass (delivering_ set meanwhile).
  void serveAll(SharedCq& cq) noexcept;
  void reportCqError(SharedCq& cq, int err, const char* op) noexcept;
  void deliver(const ibv_wc& wc) noexcept;
  void handOver(CompletionHandler* handler, const ibv_wc& wc) noexcept;  // with onPollBegin first
  // The ping-pong shape: when every completion of a poll is for one attached QP (its number and
  // serial), none through a shared receive queue, they go to its handler between one onPollBegin
  // and onPollEnd, with one lookup for the poll. False (nothing handed over) otherwise: deliver()
  // each.
  bool handOverAllToOne(const ibv_wc* wcs, int n) noexcept;
  void endPoll() noexcept;  // onPollEnd for each

  // Attachments and drains (CompletionDispatcher.cpp).
  // Attachment::whenDrained: its CQ joins the ready line and a pass is scheduled.
  void awaitDrain(Attachment& attachment);
  // Calls back the attachments whose CQ a pass has drained (all of them with `all`).
  void callDrained(bool all) noexcept;
  void detach(Attachment& attachment) noexcept;
  // Nothing more is served on a later turn: no resumed pass, no polling turn, no CQ waiting.
  void dropPendingWork() noexcept;
  // SharedCqPool::releaseIdle on a later turn than the detach that emptied a CQ, never inside a
  // pass over the CQs.
  static void onTrimTurn(int, short, void* self) noexcept;
  void releaseIdleCqs() noexcept;

  event_base* base_;
  const detail::PollingSettings& settings_;
  ibv_context* context_;
  Owner& owner_;
  CompletionChannel channel_;
  event* event_ = nullptr;
  detail::NextTurn resume_;  // budget spent: serve the ready CQs again on a later turn
  detail::NextTurn trimTurn_;  // a detach left a CQ empty: releaseIdleCqs
  detail::AdaptivePolling polling_;  // Reactor::setPollingWindow
  detail::TurnBudget turnBudget_;    // Reactor::setTurnBudget
  detail::SharedCqPool pool_;  // its CQs are destroyed before the channel
  detail::Ring<SharedCq*> ready_;
  std::vector<SharedCq*> recent_;      // noteRecent, in the order they handed out
  std::vector<SharedCq*> recentPass_;  // recent_ as pollRecent took it (kept: no allocation once warm)
  size_t firstToPoll_ = 0;  // where pollAll's next pass starts: one further after a pass that did not finish
  bool delivering_ = false;
  std::vector<Attachment*> awaitingDrain_;  // Attachment::whenDrained, in the order asked
  std::vector<CompletionHandler*> inPoll_;  // the handlers given completions of the current poll
  int pollReceives_ = 0;                    // how many receive completions the current poll found
  bool removed_ = false;  // stop(): the device is going away
  CompletionStats& stats_;
};

}  // namespace evrdma
