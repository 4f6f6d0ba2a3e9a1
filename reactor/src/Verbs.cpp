// The deleters of the RAII types in Verbs.h, opening a device, and creating completion queues.
#include "evrdma/Verbs.h"

#include <fcntl.h>

#include <cerrno>
#include <utility>

#include "CmDispatcher.h"
#include "RegisteredHeap.h"

namespace evrdma {
namespace {

// Verbs destroy calls return 0 or a positive errno (some older providers: -1 with errno set).
int errnoResult(int rc) noexcept {
  if (rc == 0) return 0;
  if (rc > 0) return -rc;
  return errno ? -errno : -EIO;
}

}  // namespace

int DeviceContextDeleter::operator()(ibv_context* c) const noexcept { return errnoResult(ibv_close_device(c)); }
int ProtectionDomainDeleter::operator()(ibv_pd* pd) const noexcept {
  if (detail::RegisteredHeap::installed()) detail::RegisteredHeap::instance()->forget(pd);  // its slabs first
  return errnoResult(ibv_dealloc_pd(pd));
}
int SharedReceiveQueueDeleter::operator()(ibv_srq* srq) const noexcept { return errnoResult(ibv_destroy_srq(srq)); }
int CompletionChannelDeleter::operator()(ibv_comp_channel* ch) const noexcept {
  return errnoResult(ibv_destroy_comp_channel(ch));
}
int MemoryRegionDeleter::operator()(ibv_mr* mr) const noexcept { return errnoResult(ibv_dereg_mr(mr)); }
int CmEventChannelDeleter::operator()(rdma_event_channel* ch) const noexcept {
  rdma_destroy_event_channel(ch);
  return 0;
}
int CmIdDeleter::operator()(rdma_cm_id* id) const noexcept { return errnoResult(detail::destroyCmId(id)); }
int CmQueuePairDeleter::operator()(rdma_cm_id* id) const noexcept {
  rdma_destroy_qp(id);
  return 0;
}

DeviceContext openDevice(const std::string& name, int& error) {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr) {
    error = errno ? -errno : -ENODEV;
    return DeviceContext();
  }
  DeviceContext context;
  error = -ENODEV;
  for (int i = 0; i < count; ++i) {
    if (name != ibv_get_device_name(devices[i])) continue;
    errno = 0;
    context.reset(ibv_open_device(devices[i]));
    error = context ? 0 : (errno ? -errno : -EIO);
    break;
  }
  ibv_free_device_list(devices);  // an opened context stays valid after this
  return context;
}

int setNonBlocking(int fd) noexcept {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  return 0;
}

bool isIwarp(const ibv_context* context) noexcept {
  return context != nullptr && context->device->transport_type == IBV_TRANSPORT_IWARP;
}

CompletionQueue CompletionQueue::create(ibv_context* context, int depth, ibv_comp_channel* channel,
                                        void* cqContext, int& error) {
  errno = 0;
  ibv_cq* cq = ibv_create_cq(context, depth, cqContext, channel, 0);
  error = cq ? 0 : (errno ? -errno : -ENOMEM);
  return CompletionQueue(cq);
}

CompletionQueue::CompletionQueue(CompletionQueue&& other) noexcept
    : cq_(std::exchange(other.cq_, nullptr)), unacked_(std::exchange(other.unacked_, 0)) {}

CompletionQueue& CompletionQueue::operator=(CompletionQueue&& other) noexcept {
  if (this != &other) {
    reset();
    cq_ = std::exchange(other.cq_, nullptr);
    unacked_ = std::exchange(other.unacked_, 0);
  }
  return *this;
}

void CompletionQueue::noteEvent() noexcept {
  if (++unacked_ >= kAckBatch) flushAcks();
}

void CompletionQueue::flushAcks() noexcept {
  if (cq_ != nullptr && unacked_ > 0) ibv_ack_cq_events(cq_, unacked_);
  unacked_ = 0;
}

int CompletionQueue::reset() noexcept {
  if (cq_ == nullptr) return 0;
  flushAcks();
  return errnoResult(ibv_destroy_cq(std::exchange(cq_, nullptr)));
}

}  // namespace evrdma
