// BufferPool: registering its one region and handing its buffers out and back by index.
#include "evrdma/BufferPool.h"

#include <cerrno>

namespace evrdma {

BufferPool BufferPool::allocate(ibv_pd* pd, uint32_t count, size_t bufferSize, int access, int& error) {
  error = 0;
  BufferPool pool;
  if (count == 0 || bufferSize == 0) {
    error = -EINVAL;
    return pool;
  }
  if (bufferSize > SIZE_MAX / count) {
    error = -EOVERFLOW;
    return pool;
  }
  pool.region_ = MemoryRegion::allocate(pd, size_t{count} * bufferSize, access, error);
  if (!pool.region_) return BufferPool{};
  pool.bufferSize_ = bufferSize;
  pool.taken_.assign(count, false);
  pool.free_.reserve(count);
  for (uint32_t index = count; index-- > 0;) pool.free_.push_back(index);
  return pool;
}

int BufferPool::acquire() noexcept {
  if (free_.empty()) return -ENOBUFS;
  const uint32_t index = free_.back();
  free_.pop_back();
  taken_[index] = true;
  return static_cast<int>(index);
}

int BufferPool::release(uint32_t index) noexcept {
  if (index >= taken_.size() || !taken_[index]) return -EINVAL;
  taken_[index] = false;
  free_.push_back(index);
  return 0;
}

int BufferPool::indexOf(const Slice& slice) const noexcept {
  if (slice.region != &region_ || bufferSize_ == 0 || !region_.contains(slice.offset, slice.length)) return -1;
  return static_cast<int>(slice.offset / bufferSize_);
}

}  // namespace evrdma
