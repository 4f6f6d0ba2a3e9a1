/// \file
/// RAII types for the libibverbs and librdmacm objects evrdma uses, and small helpers around them.
/// Every type here frees its object exactly once, in its destructor or reset(); none of them blocks.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <string>

#include "evrdma/UniqueHandle.h"

namespace evrdma {

/// The deleters of the handles below: each frees its object and returns 0 or -errno.
struct DeviceContextDeleter { int operator()(ibv_context* c) const noexcept; };
struct ProtectionDomainDeleter { int operator()(ibv_pd* pd) const noexcept; };
struct CompletionChannelDeleter { int operator()(ibv_comp_channel* ch) const noexcept; };
struct SharedReceiveQueueDeleter { int operator()(ibv_srq* srq) const noexcept; };
struct MemoryRegionDeleter { int operator()(ibv_mr* mr) const noexcept; };
struct CmEventChannelDeleter { int operator()(rdma_event_channel* ch) const noexcept; };
struct CmIdDeleter { int operator()(rdma_cm_id* id) const noexcept; };
struct CmQueuePairDeleter { int operator()(rdma_cm_id* id) const noexcept; };

using DeviceContext = UniqueHandle<ibv_context, DeviceContextDeleter>;
using ProtectionDomain = UniqueHandle<ibv_pd, ProtectionDomainDeleter>;
using CompletionChannel = UniqueHandle<ibv_comp_channel, CompletionChannelDeleter>;
using SharedReceiveQueueHandle = UniqueHandle<ibv_srq, SharedReceiveQueueDeleter>;
using MemoryRegionHandle = UniqueHandle<ibv_mr, MemoryRegionDeleter>;
using CmEventChannel = UniqueHandle<rdma_event_channel, CmEventChannelDeleter>;
/// rdma_destroy_id waits until every CM event of the id has been acked: ack before you destroy.
using CmId = UniqueHandle<rdma_cm_id, CmIdDeleter>;
/// Owns the QP that rdma_create_qp made on an id (not the id itself): destroys it with rdma_destroy_qp.
using CmQueuePair = UniqueHandle<rdma_cm_id, CmQueuePairDeleter>;

/// Opens the RDMA device called `name` (e.g. "rxe0"); on failure returns an empty handle and sets
/// `error` to -errno (-ENODEV when no device has that name).
DeviceContext openDevice(const std::string& name, int& error);

/// Makes `fd` non-blocking. Returns 0 or -errno.
int setNonBlocking(int fd) noexcept;

/// Whether the device of `context` speaks iWARP (siw, Chelsio...): no immediate data, no RNR retry
/// (a send that finds no receive ends the connection), 255 bytes of private data at most. False
/// for a null context.
bool isIwarp(const ibv_context* context) noexcept;

/// A completion queue that remembers how many completion events it has taken from its channel.
/// Events are acked in batches (ibv_ack_cq_events takes a mutex), and whatever is still unacked is
/// flushed before ibv_destroy_cq, which would otherwise wait forever.
class CompletionQueue {
 public:
  static constexpr unsigned kAckBatch = 64;

  CompletionQueue() noexcept = default;
  /// Returns an empty queue and sets `error` to -errno on failure. `channel` may be null (no events).
  static CompletionQueue create(ibv_context* context, int depth, ibv_comp_channel* channel,
                                void* cqContext, int& error);

  CompletionQueue(CompletionQueue&& other) noexcept;
  CompletionQueue& operator=(CompletionQueue&& other) noexcept;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue() { reset(); }

  ibv_cq* get() const noexcept { return cq_; }
  explicit operator bool() const noexcept { return cq_ != nullptr; }

  /// Counts one event taken with ibv_get_cq_event; acks when a batch is full.
  void noteEvent() noexcept;
  unsigned unackedEvents() const noexcept { return unacked_; }
  void flushAcks() noexcept;

  /// Acks what is left, destroys the CQ. Returns 0 or -errno.
  int reset() noexcept;

 private:
  explicit CompletionQueue(ibv_cq* cq) noexcept : cq_(cq) {}
  ibv_cq* cq_ = nullptr;
  unsigned unacked_ = 0;
};

}  // namespace evrdma
