// CompletionDispatcher: one non-blocking completion channel per device, watched by the reactor,
// and a small pool of CQs shared by every connection on that device (a CQ per connection runs out
// of resources fast: soft-iWARP, for one, maps each CQ into the process and allows 144 pages).
//
// A connection attaches with the number of CQ entries it may need (its send + receive depth); the
// reservation guarantees the shared CQ cannot overflow. Each work completion goes to the handler
// of its QP (by qp_num), and only if its wr_id carries the attachment's serial, so completions left
// behind by a destroyed QP never reach a newer QP that got the same number.
//
// On readiness: every completion event is taken (ibv_get_cq_event until EAGAIN; acks batched per
// CQ and flushed before the CQ is destroyed), each CQ that had an event is re-armed, and only then
// polled until empty: a completion landing between the last poll and the arm still raises an
// event. At most kBudget completions are handled per turn, shared equally by the CQs a pass
// serves; what a CQ holds past its share waits for a later turn, after the loop has polled its
// other sources and timers, with that CQ at the back of the ready list, so one busy CQ cannot
// starve the others. The same holds for the passes over every CQ (event mode's poll before the
// channel's read, adaptive polling's spins): a pass that could not finish makes the next one start
// a CQ further on.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include <mutex>

#include "evrdma/Verbs.h"
#include "AsyncEventRouter.h"
#include "evrdma/CompletionStats.h"
#include "WorkRequestId.h"
#include "NextTurn.h"
#include "Ring.h"
#include "SharedReceiveQueue.h"
#include "SmallBufferArena.h"

struct event;

namespace evrdma {

class Reactor;

class CompletionHandler {
 public:
  virtual void onCompletion(const ibv_wc& wc) noexcept = 0;
  // An asynchronous error event of the device about this handler's QP (QP_FATAL, QP_REQ_ERR,
  // QP_ACCESS_ERR, PATH_MIG_ERR), its CQ (CQ_ERR) or the whole device (DEVICE_FATAL).
  virtual void onAsyncError(ibv_event_type type) noexcept = 0;
  // The shared CQ itself failed (ibv_req_notify_cq or ibv_poll_cq returned an error): its
  // completions can no longer be trusted to arrive. `err` is -errno, `op` the call.
  virtual void onCompletionQueueError(int err, const char* op) noexcept = 0;
  // The device is being removed: nothing posted will come back, and its resources must go.
  virtual void onDeviceRemoved() noexcept = 0;
  // Completions are handed out a poll at a time: before this handler's first completion of a poll
  // comes onPollBegin, and once the poll's last completion was handed out, onPollEnd, so that work
  // requests posted from its callbacks go to the device together (one doorbell, one signaled).
  // `receives`: how many receive completions the poll found, for all handlers: with one message in
  // a poll there is little to batch, and its answer may be awaited.
  virtual void onPollBegin(int receives) noexcept { (void)receives; }
  virtual void onPollEnd() noexcept {}

 protected:
  ~CompletionHandler() = default;
};


// Device async events are read from the context's fd, which every Reactor on the device watches:
// one read by another Reactor arrives through this dispatcher's inbox (see AsyncEventRouter).
class CompletionDispatcher final : private detail::AsyncInbox {
 public:
  static constexpr int kBudget = 256;
  static constexpr uint32_t kSharedCqEntries = 512;
  // Adaptive polling: how many polls one loop turn makes before it goes back through libevent,
  // and every how many turns without a completion the clock is read (see spin()).
  static constexpr int kPollBurst = 32;
  static constexpr uint32_t kTurnsPerClockRead = 8;

 private:
  struct SharedCq;

 public:
  // A reservation on a shared CQ for one QP. Destroy it only outside its handler's callbacks
  // (connections destroy theirs deferred), after the QP is gone.
  class Attachment {
   public:
    ~Attachment();
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;
    ibv_cq* cq() const noexcept;
    uint32_t serial() const noexcept { return serial_; }
    // Routes the completions of `qpNum` to the handler; call once the QP exists.
    void bind(uint32_t qpNum) noexcept;
    // The QP receives through `srq`: its receive completions carry the SRQ's serial.
    void receiveThrough(detail::SharedReceiveQueue* srq) noexcept { srq_ = srq; }
    // Delivers every completion already in the CQ now (for every QP on it, in order), without
    // waiting for the channel: a CM event such as DISCONNECTED may be read before the
    // completions that preceded it. Does nothing while the dispatcher is delivering already.
    void deliverPending() noexcept;

   private:
    friend class CompletionDispatcher;
    Attachment(CompletionDispatcher& owner, SharedCq& cq, uint32_t entries, uint32_t serial,
               CompletionHandler* handler)
        : owner_(owner), cq_(cq), entries_(entries), serial_(serial), handler_(handler) {}
    CompletionDispatcher& owner_;
    SharedCq& cq_;
    uint32_t entries_;
    uint32_t serial_;
    CompletionHandler* handler_;
    uint32_t qpNum_ = 0;
    bool bound_ = false;
    detail::SharedReceiveQueue* srq_ = nullptr;
  };

  // Counts into `stats`, which the Reactor keeps after this dispatcher is gone.
  CompletionDispatcher(Reactor& reactor, ibv_context* context, CompletionStats& stats)
      : reactor_(reactor), context_(context), stats_(stats) {}
  ~CompletionDispatcher();
  CompletionDispatcher(const CompletionDispatcher&) = delete;
  CompletionDispatcher& operator=(const CompletionDispatcher&) = delete;

  // Creates the channel and starts watching it. Returns 0 or -errno.
  int init() noexcept;

  // Reserves `entries` CQ entries for one QP whose completions go to `handler`. Null + -errno.
  std::unique_ptr<Attachment> attach(uint32_t entries, CompletionHandler* handler, int& error);

  ibv_context* context() const noexcept { return context_; }
  const char* deviceName() const noexcept { return context_ != nullptr && context_->device != nullptr ? ibv_get_device_name(context_->device) : "?"; }
  // The device is going away (DEVICE_REMOVAL, DEVICE_FATAL, or its fds failed): every attached
  // handler hears onDeviceRemoved, its events are removed from the loop (a removed device's fds
  // stay readable: the loop would spin), no new attachment is accepted (-ENODEV), and once the
  // last one is gone its CQs, channel and PD are destroyed (before librdmacm closes the device's
  // context with the last id on it), so the device's removal can complete.
  void markDeviceRemoved() noexcept;
  bool deviceRemoved() const noexcept { return removed_; }
  // The device's protection domain, shared by every connection on it and by the memory the
  // application registers for them: a region stays usable across connections. It is freed with
  // the Reactor, so every MemoryRegion on it must be gone by then.
  ibv_pd* protectionDomain() const noexcept { return pd_.get(); }
  // Registered memory for the connections' small buffers, on that protection domain.
  detail::SmallBufferArena& smallBuffers() {
    if (!smallBuffers_) smallBuffers_ = std::make_unique<detail::SmallBufferArena>(pd_.get(), &memoryAccount());
    return *smallBuffers_;
  }
  detail::MemoryAccount& memoryAccount() noexcept;
  // A shared receive queue of `bufferSize`-byte buffers with room to guarantee `reserve` more
  // (made on first use; another once one is full). Null + -errno (-EOPNOTSUPP: the device has no
  // SRQ).
  detail::SharedReceiveQueue* sharedReceiveQueue(size_t bufferSize, uint32_t reserve, int& error);
  void addSharedReceiveStats(SharedReceiveStats& stats) const noexcept;
  const CompletionStats& stats() const noexcept { return stats_; }
  size_t sharedCqCount() const noexcept { return cqs_.size(); }

 private:
  struct SharedCq {
    CompletionQueue cq;
    uint32_t capacity = 0;
    uint32_t reserved = 0;
    bool queued = false;  // waiting in ready_
    bool needsArm = false;
    bool firstPoll = false;
    bool foundBeforeRead = false;  // the poll before the channel's read found completions
  };

  static void onReadable(int, short, void* self) noexcept;
  static void onAsyncReadable(int, short, void* self) noexcept;
  void drainAsyncEvents() noexcept;
  void handleAsync(const detail::AsyncEventCopy& event) noexcept;
  void post(const detail::AsyncEventCopy& event) noexcept override;  // any thread
  static void onInboxReadable(int, short, void* self) noexcept;
  void run() noexcept;
  // Adaptive polling (Reactor::setPollingWindow): keeps polling on later turns until a window
  // passes with nothing, then arms the CQs that need it and looks once more (the notify race).
  static void onSpinTurn(int, short, void* self) noexcept;
  void startPolling() noexcept;
  void spin() noexcept;
  // Polls every CQ once, adding the completions handled to `handled`, and notes in each CQ whether
  // it held any (foundBeforeRead), each up to its share of the budget, again while budget is left.
  // False if the budget was spent before every CQ was drained; the next call then starts a CQ
  // further on, so every CQ gets its turn at the front.
  bool pollAll(int& handled) noexcept;
  // What each of `cqs` CQs may take of `budget` completions in one pass.
  static int shareOf(int budget, size_t cqs) noexcept;
  // The turn's completion budget is spent: the rest is served on a later turn.
  void yieldBudget() noexcept;
  // Arms `cq` if an event was taken from it since it was last armed; a failure fails its connections.
  void armIfNeeded(SharedCq& cq) noexcept;
  // Polls one CQ until it is empty or `budget` completions were handled; adds them to `handled`.
  // Returns false if the CQ may hold more (budget spent) or failed.
  bool serve(SharedCq& cq, int budget, int& handled) noexcept;
  void reportCqError(SharedCq& cq, int err, const char* op) noexcept;
  // The handlers of the bound attachments that `matches`, copied: calling them may change the map.
  template <typename Predicate>
  std::vector<CompletionHandler*> handlersWhere(Predicate matches) const;
  void deliver(const ibv_wc& wc) noexcept;
  // The attachment bound to `qpNum`, or null; the last one found is kept, since consecutive
  // completions are mostly of one QP (a hash lookup per completion is a good part of a small
  // message's cost in the dispatcher).
  Attachment* attachmentOf(uint32_t qpNum) noexcept;
  void handOver(CompletionHandler* handler, const ibv_wc& wc) noexcept;  // with onPollBegin first
  void endPoll() noexcept;                                              // onPollEnd for each
  detail::SharedReceiveQueue* sharedReceiveQueueWithSerial(uint32_t serial) const noexcept;
  uint32_t takeSerial() noexcept;  // for an attachment or an SRQ: 1 .. kSerialMask, then again
  void detach(Attachment& attachment) noexcept;
  void releaseIfUnused() noexcept;
  void releaseVerbs() noexcept;

  Reactor& reactor_;
  ibv_context* context_;
  int maxCqe_ = 0;
  uint32_t maxSrqWr_ = 0;
  ProtectionDomain pd_;  // declared first: freed after the CQs and the channel
  std::unique_ptr<detail::SmallBufferArena> smallBuffers_;  // freed before the PD
  CompletionChannel channel_;
  event* event_ = nullptr;
  detail::NextTurn resume_;  // budget spent: serve the ready CQs again on a later turn
  detail::NextTurn spinTurn_;  // adaptive polling: the next turn's poll
  bool polling_ = false;
  uint32_t emptyTurns_ = 0;  // polling turns since the last completion
  std::chrono::steady_clock::time_point quietSince_{};  // read at the kTurnsPerClockRead-th of them
  event* asyncEvent_ = nullptr;  // the device's async event fd (shared by the process's users of it)
  int inboxFd_ = -1;              // eventfd: another Reactor handed us an async event
  event* inboxEvent_ = nullptr;
  std::mutex inboxMutex_;
  std::vector<detail::AsyncEventCopy> inbox_;
  // After every QP that receives through them, before the arena and PD their buffers come from.
  std::vector<std::unique_ptr<detail::SharedReceiveQueue>> srqs_;
  std::vector<std::unique_ptr<SharedCq>> cqs_;  // destroyed after the channel's users, before it
  detail::Ring<SharedCq*> ready_;
  size_t firstToPoll_ = 0;  // where pollAll's next pass starts: one further after a pass that did not finish
  bool delivering_ = false;
  std::vector<CompletionHandler*> inPoll_;  // the handlers given completions of the current poll
  int pollReceives_ = 0;                    // how many receive completions the current poll found
  std::unordered_map<uint32_t, Attachment*> byQpNum_;
  Attachment* lastAttachment_ = nullptr;  // attachmentOf's last find; reset whenever byQpNum_ changes
  uint32_t nextSerial_ = 1;
  size_t attachments_ = 0;
  bool removed_ = false;
  bool holdsDevice_ = false;  // counted in DeviceUsers until releaseVerbs
  bool releaseScheduled_ = false;
  CompletionStats& stats_;
};

}  // namespace evrdma
