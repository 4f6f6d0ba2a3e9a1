// Device: what one RDMA device holds for one Reactor: its protection domain and the buffer arena on
// it, the shared receive queues, the device's async events, its removal, and the dispatcher that
// routes its completions (CompletionDispatcher).
//
// Async events are read from the context's fd, which every Reactor on the device watches: one read
// by another Reactor arrives through this Device's inbox (see AsyncEventRouter).
//
// Removal (DEVICE_REMOVAL from the CM, DEVICE_FATAL, or a failed fd): every connection on the
// device hears onDeviceRemoved, the Device's events leave the loop (a removed device's fds stay
// readable: the loop would spin), nothing new is accepted (-ENODEV), and once the last connection
// has detached, the CQs, channel, SRQs, arena and PD are destroyed (before librdmacm closes the
// device's context with the last id on it), so that the removal can complete.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "AsyncEventRouter.h"
#include "CompletionDispatcher.h"
#include "SharedReceiveQueue.h"
#include "SmallBufferArena.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/Verbs.h"

struct event;

namespace evrdma {

class Reactor;
struct SharedReceiveStats;

class Device final : private detail::AsyncInbox, private CompletionDispatcher::Owner {
 public:
  // Counts into `stats`, which the Reactor keeps after this Device is gone.
  Device(Reactor& reactor, ibv_context* context, CompletionStats& stats);
  ~Device() override;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // The protection domain, the completion channel and the async events. 0 or -errno.
  int init() noexcept;

  ibv_context* context() const noexcept { return context_; }
  const char* name() const noexcept;
  // The device's protection domain, shared by every connection on it and by the memory the
  // application registers for them: a region stays usable across connections. It is freed with
  // the Reactor, so every MemoryRegion on it must be gone by then.
  ibv_pd* protectionDomain() const noexcept { return pd_.get(); }
  // A protection domain of one connection's own (ConnectionOptions::ownProtectionDomain): memory
  // registered on it is reachable through that connection's queue pair alone, whatever rkey a
  // peer learns. Null + -errno.
  ibv_pd* makeOwnDomain(int& error) noexcept;
  // Frees such a domain: at once when nothing is registered on it any more, else (memory the
  // application registered on it outlives its connection) at a later makeOwnDomain or
  // retireDomain, or when the device is released.
  void retireDomain(ibv_pd* pd) noexcept;
  // Registered memory for the connections' small buffers, on that protection domain.
  detail::SmallBufferArena& smallBuffers();
  detail::MemoryAccount& memoryAccount() noexcept;
  // A shared receive queue of `bufferSize`-byte buffers with room for `seat` (made on first use;
  // another once one is full). Null + -errno (-EOPNOTSUPP: the device has no SRQ; -ENODEV: it is
  // being removed; -ENOSPC: the seat is larger than a whole SRQ).
  detail::SharedReceiveQueue* sharedReceiveQueue(size_t bufferSize, detail::SharedReceiveQueue::Seat seat, int& error);
  void addSharedReceiveStats(SharedReceiveStats& stats) const noexcept;
  // Reserves `entries` CQ entries for one QP whose completions go to `handler`. Null + -errno
  // (-ENODEV once the device is being removed).
  std::unique_ptr<CompletionDispatcher::Attachment> attach(uint32_t entries, CompletionHandler* handler, int& error);
  const CompletionStats& stats() const noexcept { return stats_; }
  // For the Reactor's linger: the completion channel's fd (-1 once removed), and one pass over
  // the CQs.
  int completionFd() const noexcept { return !removed_ && completions_ ? completions_->channelFd() : -1; }
  void serveCompletionsNow() noexcept {
    if (!removed_ && completions_) completions_->serveNow();
  }

  // The device is going away: see the top of this file.
  void markRemoved() noexcept;
  bool removed() const noexcept { return removed_; }

 private:
  static void onAsyncReadable(int, short, void* self) noexcept;
  void drainAsyncEvents() noexcept;
  void handleAsync(const detail::AsyncEventCopy& event) noexcept;
  void post(const detail::AsyncEventCopy& event) noexcept override;  // any thread
  static void onInboxReadable(int, short, void* self) noexcept;
  void onChannelFailed() noexcept override { markRemoved(); }
  void onDetached() noexcept override { releaseIfUnused(); }
  void releaseIfUnused() noexcept;
  void releaseVerbs() noexcept;

  Reactor& reactor_;
  ibv_context* context_;
  CompletionStats& stats_;
  uint32_t maxSrqWr_ = 0;
  ProtectionDomain pd_;  // declared first: freed after everything made on it
  std::vector<ibv_pd*> retiredDomains_;  // connections' own, still in use by some registration
  std::unique_ptr<detail::SmallBufferArena> smallBuffers_;  // freed before the PD
  // After every QP that receives through them, before the arena and PD their buffers come from.
  std::vector<std::unique_ptr<detail::SharedReceiveQueue>> srqs_;
  std::unique_ptr<CompletionDispatcher> completions_;
  event* asyncEvent_ = nullptr;  // the device's async event fd (shared by the process's users of it)
  int inboxFd_ = -1;              // eventfd: another Reactor handed us an async event
  event* inboxEvent_ = nullptr;
  std::mutex inboxMutex_;
  std::vector<detail::AsyncEventCopy> inbox_;
  bool removed_ = false;
  bool holdsDevice_ = false;  // counted in DeviceUsers until releaseVerbs
  bool releaseScheduled_ = false;
};

}  // namespace evrdma
