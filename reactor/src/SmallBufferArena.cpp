// SmallBufferArena: registering 16 KiB slabs, carving small buffers out of them, and taking them
// back.
#include "SmallBufferArena.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace evrdma::detail {

SmallBufferArena::Lease& SmallBufferArena::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    reset();
    arena_ = other.arena_;
    slab_ = other.slab_;
    data_ = other.data_;
    index_ = other.index_;
    other.arena_ = nullptr;
    other.slab_ = nullptr;
    other.data_ = nullptr;
  }
  return *this;
}

void SmallBufferArena::Lease::reset() noexcept {
  if (slab_ != nullptr) arena_->give(slab_, index_);
  arena_ = nullptr;
  slab_ = nullptr;
  data_ = nullptr;
}

uint32_t SmallBufferArena::Lease::lkey() const noexcept { return slab_ != nullptr ? slab_->region.lkey() : 0; }

SmallBufferArena::~SmallBufferArena() = default;

size_t SmallBufferArena::classOf(size_t bytes) noexcept {
  size_t index = 0;
  for (size_t size = kSmallestBlock; size < bytes; size <<= 1) ++index;
  return index;
}

size_t SmallBufferArena::blockSize(size_t bytes) noexcept { return kSmallestBlock << classOf(bytes); }

SmallBufferArena::Lease SmallBufferArena::take(size_t bytes, int& error) {
  error = 0;
  Lease lease;
  if (!serves(bytes)) {
    error = -EINVAL;
    return lease;
  }
  const size_t index = classOf(bytes), size = kSmallestBlock << index;
  FlaggedList<Slab, &Slab::listed>& open = withFree_[index];
  Slab* slab = open.empty() ? nullptr : open.back();
  if (slab == nullptr) {
    auto made = std::make_unique<Slab>();
    if ((error = chargeTo(account_, kSlabBytes, made->charge)) != 0) return lease;
    made->region = MemoryRegion::allocate(pd_, kSlabBytes, kLocalWrite, error);
    if (!made->region) return lease;
    made->classIndex = index;
    const auto blocks = static_cast<uint32_t>(kSlabBytes / size);
    made->free.reserve(blocks);
    for (uint32_t block = blocks; block-- > 0;) made->free.push_back(block);
    slab = made.get();
    open.add(slab);
    ++emptySlabs_[index];
    slabs_[index].push_back(std::move(made));
  }
  const uint32_t block = slab->free.back();
  slab->free.pop_back();
  if (slab->inUse++ == 0) --emptySlabs_[index];
  if (slab->free.empty()) open.popBack();
  ++blocksInUse_;
  lease.arena_ = this;
  lease.slab_ = slab;
  lease.index_ = block;
  lease.data_ = slab->region.data() + size_t{block} * size;
  std::memset(lease.data_, 0, size);  // as a fresh registration would be
  return lease;
}

void SmallBufferArena::give(Slab* slab, uint32_t index) noexcept {
  slab->free.push_back(index);
  --slab->inUse;
  --blocksInUse_;
  const size_t classIndex = slab->classIndex;
  withFree_[classIndex].add(slab);
  if (slab->inUse != 0) return;
  // Keep one empty slab per class as a spare; deregister the others.
  if (emptySlabs_[classIndex] == 0) {
    emptySlabs_[classIndex] = 1;
    return;
  }
  withFree_[classIndex].remove(slab);
  auto& slabs = slabs_[classIndex];
  for (auto it = slabs.begin(); it != slabs.end(); ++it)
    if (it->get() == slab) {
      slabs.erase(it);
      return;
    }
}

size_t SmallBufferArena::slabCount() const noexcept {
  size_t count = 0;
  for (const auto& slabs : slabs_) count += slabs.size();
  return count;
}

}  // namespace evrdma::detail
