// SharedReceiveQueue: creating the SRQ, feeding it from its buffer pool, and growing the pool on
// the limit event.
#include "SharedReceiveQueue.h"

#include <algorithm>
#include <cerrno>

#include "Logging.h"
#include "WorkRequestId.h"

namespace evrdma::detail {

int SharedReceiveQueue::init(uint32_t maxWr) noexcept {
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = maxWr;
  attr.attr.max_sge = 1;
  errno = 0;
  srq_.reset(ibv_create_srq(pd_, &attr));
  if (!srq_) return errno ? -errno : -ENOMEM;
  // The provider may round up; we never post more than we asked for.
  capacity_ = std::min(attr.attr.max_wr, maxWr);
  if (int rc = grow(kChunkBuffers); rc != 0) return rc;
  growths_ = 0;  // counts growth past the first chunk
  armLowWatermark();
  return 0;
}

int SharedReceiveQueue::join(Seat seat) noexcept {
  if (reserved_ + seat.reserve > buffers())
    if (int rc = grow(reserved_ + seat.reserve - buffers()); rc != 0) return rc;
  reserved_ += seat.reserve;
  seated_ += seat.depth;
  ++connections_;
  return 0;
}

void SharedReceiveQueue::leave(Seat seat) noexcept {
  reserved_ -= seat.reserve;
  seated_ -= seat.depth;
  --connections_;
}

uint8_t* SharedReceiveQueue::buffer(uint32_t index) const noexcept {
  return chunks_[index / kChunkBuffers]->data() + size_t{index % kChunkBuffers} * bufferSize_;
}

void SharedReceiveQueue::takeBackStray(const ibv_wc& wc) noexcept {
  EVRDMA_LOG(LogLevel::Info, "a receive completion for QP %u, no longer attached: its shared buffer is reposted",
             wc.qp_num);
  (void)repost(wrid::index(wc.wr_id));
}

int SharedReceiveQueue::repost(uint32_t index) noexcept {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(buffer(index));
  sge.length = static_cast<uint32_t>(bufferSize_);
  sge.lkey = chunks_[index / kChunkBuffers]->lkey();
  ibv_recv_wr wr{};
  wr.wr_id = wrid::receive(serial_, index);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_srq_recv(srq_.get(), &wr, &bad); rc != 0) return -rc;
  ++posted_;
  return 0;
}

int SharedReceiveQueue::grow(uint32_t wanted) noexcept {
  const uint32_t chunks = (wanted + kChunkBuffers - 1) / kChunkBuffers;
  if (buffers() + chunks * kChunkBuffers > capacity_) return -ENOSPC;
  for (uint32_t c = 0; c < chunks; ++c) {
    auto chunk = std::make_unique<BufferMemory>();
    if (int rc = chunk->allocate(&arena_, account_, pd_, bufferSize_ * kChunkBuffers, kLocalWrite); rc != 0) return rc;
    chunks_.push_back(std::move(chunk));
    const uint32_t first = buffers() - kChunkBuffers;
    for (uint32_t index = first; index < first + kChunkBuffers; ++index)
      if (int rc = repost(index); rc != 0) return rc;
  }
  ++growths_;
  return 0;
}

void SharedReceiveQueue::armLowWatermark() noexcept {
  // Raised once fewer than a quarter of the pool's buffers are posted; the device disarms it then.
  ibv_srq_attr attr{};
  attr.srq_limit = std::max<uint32_t>(1, buffers() / 4);
  (void)ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT);  // without it the pool only grows on joins
}

void SharedReceiveQueue::onLowWatermark() noexcept {
  ++lowWatermarkEvents_;
  const auto byBytes = static_cast<uint32_t>(kGrowthBytes / bufferSize_);  // at most 65 536
  const uint32_t more = std::min(std::max({kChunkBuffers, buffers() / 2, byBytes}), capacity_ - buffers());
  if (more < kChunkBuffers || grow(more) != 0) {  // full, or past the budget
    ++growthRefusals_;
    EVRDMA_LOG(LogLevel::Warn, "a shared receive queue runs low (%u buffers) and cannot grow: %s", buffers(),
               more < kChunkBuffers ? "it holds the most it may" : "its memory could not be registered (budget?)");
  } else {
    EVRDMA_LOG(LogLevel::Info, "a shared receive queue ran low: grew to %u buffers", buffers());
  }
  armLowWatermark();
}

void SharedReceiveQueue::addTo(SharedReceiveStats& stats) const noexcept {
  ++stats.queues;
  stats.buffers += buffers();
  stats.posted += posted_;
  stats.reserved += reserved_;
  stats.connections += connections_;
  stats.lowWatermarkEvents += lowWatermarkEvents_;
  stats.growths += growths_;
  stats.growthRefusals += growthRefusals_;
  stats.registeredBytes += chunks_.size() * BufferMemory::pinnedBytes(bufferSize_ * kChunkBuffers);
}

}  // namespace evrdma::detail
