// LendingPool: registering the lending memory once, and carving, zeroing and taking back its
// pieces.
#include "LendingPool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace evrdma::detail {

int LendingPool::init(ibv_pd* pd, MemoryAccount& account, uint64_t bytes) noexcept {
  const uint64_t pinned = (bytes + 4095) / 4096 * 4096;
  if (int rc = account.charge(pinned, charge_); rc != 0) return rc;
  int error = 0;
  region_ = MemoryRegion::allocate(pd, bytes, kRemoteRead | kRemoteWrite, error);
  if (!region_) {
    charge_.reset();
    return error;
  }
  freeRanges_.emplace(0, bytes);
  free_ = bytes;
  return 0;
}

MemoryRegion LendingPool::take(uint64_t bytes, int access) noexcept {
  if (bytes == 0 || bytes > free_) return MemoryRegion();
  const size_t needed = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  for (auto it = freeRanges_.begin(); it != freeRanges_.end(); ++it) {
    // The pool's end may not be aligned: its last range can be shorter than `needed` but still fit.
    const size_t taken = std::min<size_t>(needed, it->second);
    if (it->second < bytes) continue;
    const size_t offset = it->first, length = it->second;
    freeRanges_.erase(it);
    if (length > taken) freeRanges_.emplace(offset + taken, length - taken);
    free_ -= taken;
    // The piece is what was asked for; the alignment padding after it stays with it.
    return MemoryRegion::view(region_, offset, bytes, access);
  }
  return MemoryRegion();
}

void LendingPool::give(const MemoryRegion& piece) noexcept {
  if (!piece || piece.get() != region_.get()) return;
  const size_t offset = static_cast<size_t>(piece.data() - region_.data());
  const size_t taken = std::min<size_t>((piece.length() + kAlignment - 1) / kAlignment * kAlignment,
                                        region_.length() - offset);
  std::memset(region_.data() + offset, 0, taken);
  free_ += taken;
  auto next = freeRanges_.emplace(offset, taken).first;
  if (auto after = std::next(next); after != freeRanges_.end() && next->first + next->second == after->first) {
    next->second += after->second;
    freeRanges_.erase(after);
  }
  if (next != freeRanges_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == next->first) {
      before->second += next->second;
      freeRanges_.erase(next);
    }
  }
}

}  // namespace evrdma::detail
