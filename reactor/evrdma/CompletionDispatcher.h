// CompletionDispatcher: one non-blocking completion channel per device, watched by the reactor,
// serving any number of CQs. On readiness it takes every completion event (ibv_get_cq_event until
// EAGAIN; acks batched per CQ and flushed before the CQ is destroyed), re-arms each CQ that had an
// event, and only then polls it until empty, so a completion that lands between the last poll and
// the arm still raises an event. Each work completion goes to the CompletionHandler of its CQ. At
// most kBudget completions are handled per turn; the rest wait one turn so other fds get theirs.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>

#include "evrdma/Verbs.h"

struct event;

namespace evrdma {

class Reactor;

class CompletionHandler {
 public:
  virtual void onCompletion(const ibv_wc& wc) noexcept = 0;

 protected:
  ~CompletionHandler() = default;
};

// Counted like the OFA notes' statistics.
struct CompletionStats {
  static constexpr int kBatch = 16;  // completions asked for per ibv_poll_cq
  uint64_t events = 0;               // completion events taken from the channel
  uint64_t polls = 0;                // ibv_poll_cq calls
  uint64_t emptyFirstPolls = 0;      // first poll after an event found nothing (the arm race)
  uint64_t completions = 0;
  uint64_t budgetYields = 0;         // turns that stopped at the budget
  std::array<uint64_t, kBatch + 1> perPoll{};  // histogram: polls that returned n completions
};

class CompletionDispatcher {
 public:
  static constexpr int kBudget = 256;

  // A CQ on this dispatcher's channel. Destroy it only outside its handler's callbacks (connections
  // destroy theirs deferred), after its QPs are gone.
  class Cq {
   public:
    ~Cq();
    Cq(const Cq&) = delete;
    Cq& operator=(const Cq&) = delete;
    ibv_cq* get() const noexcept { return cq_.get(); }
    // Moves the handler (e.g. when a connection hands its CQ over). Null drops completions.
    void setHandler(CompletionHandler* handler) noexcept { handler_ = handler; }

   private:
    friend class CompletionDispatcher;
    explicit Cq(CompletionDispatcher& owner) : owner_(owner) {}
    CompletionDispatcher& owner_;
    CompletionQueue cq_;
    CompletionHandler* handler_ = nullptr;
    bool queued_ = false;   // waiting in the dispatcher's ready list
    bool needsArm_ = false;
    bool firstPoll_ = false;
  };

  CompletionDispatcher(Reactor& reactor, ibv_context* context) : reactor_(reactor), context_(context) {}
  ~CompletionDispatcher();
  CompletionDispatcher(const CompletionDispatcher&) = delete;
  CompletionDispatcher& operator=(const CompletionDispatcher&) = delete;

  // Creates the channel and starts watching it. Returns 0 or -errno.
  int init() noexcept;

  // A new CQ of `depth` entries, armed, whose completions go to `handler`. Null + error on failure.
  std::unique_ptr<Cq> createCq(int depth, CompletionHandler* handler, int& error);

  ibv_context* context() const noexcept { return context_; }
  const CompletionStats& stats() const noexcept { return stats_; }

 private:
  static void onReadable(int, short, void* self) noexcept;
  void run() noexcept;
  void forget(Cq* cq) noexcept;

  Reactor& reactor_;
  ibv_context* context_;
  CompletionChannel channel_;
  event* event_ = nullptr;
  std::deque<Cq*> ready_;
  CompletionStats stats_;
};

}  // namespace evrdma
