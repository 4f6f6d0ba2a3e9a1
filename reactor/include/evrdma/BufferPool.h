/// \file
/// BufferPool: `count` registered buffers of `bufferSize` bytes in one memory region, handed out and
/// taken back by index: the buffers an application keeps in flight for zero-copy sends, receives
/// of its own, RDMA writes or read targets, without a registration per message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "evrdma/MemoryRegion.h"

namespace evrdma {

class BufferPool {
 public:
  BufferPool() = default;
  BufferPool(BufferPool&&) noexcept = default;
  BufferPool& operator=(BufferPool&&) noexcept = default;

  /// Allocates and registers count * bufferSize bytes with `access` (see MemoryRegion). An empty
  /// pool and -errno on failure (-EINVAL for a zero count or size, -EOVERFLOW if the product does).
  static BufferPool allocate(ibv_pd* pd, uint32_t count, size_t bufferSize, int access, int& error);

  explicit operator bool() const noexcept { return static_cast<bool>(region_); }
  /// A free buffer's index, or -ENOBUFS when every buffer is taken.
  int acquire() noexcept;
  /// Gives buffer `index` back. 0, or -EINVAL for an index out of range or not taken.
  int release(uint32_t index) noexcept;

  uint8_t* data(uint32_t index) const noexcept { return region_.data() + size_t{index} * bufferSize_; }
  /// Buffer `index`, its first `length` bytes (the whole buffer by default), for Connection::send etc.
  Slice slice(uint32_t index, size_t length = SIZE_MAX) const noexcept {
    return Slice{&region_, size_t{index} * bufferSize_, length < bufferSize_ ? length : bufferSize_};
  }
  /// Which buffer a slice of this pool starts in; -1 if it is not one of ours.
  int indexOf(const Slice& slice) const noexcept;

  const MemoryRegion& region() const noexcept { return region_; }
  size_t bufferSize() const noexcept { return bufferSize_; }
  uint32_t count() const noexcept { return static_cast<uint32_t>(taken_.size()); }
  uint32_t available() const noexcept { return static_cast<uint32_t>(free_.size()); }

 private:
  MemoryRegion region_;
  size_t bufferSize_ = 0;
  std::vector<uint32_t> free_;  ///< a stack: the most recently released buffer is warm in the cache
  std::vector<bool> taken_;
};

}  // namespace evrdma
