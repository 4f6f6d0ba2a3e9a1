// RegisteredHeap: the reserved range, its slabs and runs, and their registrations (see the header).
#include "RegisteredHeap.h"

#include <event2/event.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace evrdma::detail {

namespace {

// Address space only (nothing is committed until a slab is carved): 16 GiB of evbuffer chains at
// once is more than any program here holds.
constexpr size_t kReserved = size_t{16} << 30;

std::atomic<bool> installedFlag{false};

size_t classOf(size_t bytes) noexcept {
  size_t sizeClass = 0;
  for (size_t block = RegisteredHeap::kSmallest; block < bytes; block <<= 1) ++sizeClass;
  return sizeClass;
}

size_t classBytes(size_t sizeClass) noexcept { return RegisteredHeap::kSmallest << sizeClass; }

}  // namespace

RegisteredHeap* RegisteredHeap::instance() noexcept {
  static RegisteredHeap* const heap = []() -> RegisteredHeap* {
    void* range = ::mmap(nullptr, kReserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) return nullptr;
    auto* made = new (std::nothrow) RegisteredHeap(reinterpret_cast<uintptr_t>(range), kReserved);
    if (made != nullptr) made->segmentOfUnit_.assign(kReserved / kSlabBytes, -1);
    return made;  // never freed: libevent may free its memory after static destructors
  }();
  return heap;
}

int RegisteredHeap::install() noexcept {
  if (instance() == nullptr) return -ENOMEM;
  event_set_mem_functions(&RegisteredHeap::allocate, &RegisteredHeap::reallocate, &RegisteredHeap::release);
  installedFlag.store(true, std::memory_order_release);
  return 0;
}

bool RegisteredHeap::installed() noexcept { return installedFlag.load(std::memory_order_acquire); }

void* RegisteredHeap::allocate(size_t bytes) {
  if (bytes < kSmallest) return std::malloc(bytes);
  RegisteredHeap& heap = *instance();
  std::lock_guard<std::mutex> lock(heap.mutex_);
  void* block = heap.allocateLocked(bytes);
  return block != nullptr ? block : std::malloc(bytes);  // (the range spent: copied, as before)
}

void* RegisteredHeap::reallocate(void* block, size_t bytes) {
  RegisteredHeap& heap = *instance();
  if (block == nullptr) return allocate(bytes);
  if (!heap.contains(block)) return std::realloc(block, bytes);
  size_t had = 0;
  {
    std::lock_guard<std::mutex> lock(heap.mutex_);
    had = heap.blockSizeLocked(reinterpret_cast<uintptr_t>(block));
  }
  if (bytes <= had) return block;
  void* moved = allocate(bytes);
  if (moved == nullptr) return nullptr;
  std::memcpy(moved, block, had);
  release(block);
  return moved;
}

void RegisteredHeap::release(void* block) {
  if (block == nullptr) return;
  RegisteredHeap& heap = *instance();
  if (!heap.contains(block)) {
    std::free(block);
    return;
  }
  std::lock_guard<std::mutex> lock(heap.mutex_);
  heap.releaseLocked(reinterpret_cast<uintptr_t>(block));
}

void* RegisteredHeap::allocateLocked(size_t bytes) noexcept {
  if (bytes <= kSlabBytes / 2) {
    const size_t sizeClass = classOf(bytes);
    std::vector<uintptr_t>& free = freeBlocks_[sizeClass];
    if (free.empty()) {
      const int segment = carveLocked(1, static_cast<int>(sizeClass));
      if (segment < 0) return nullptr;
      const uintptr_t start = segments_[static_cast<size_t>(segment)].start;
      const size_t block = classBytes(sizeClass);
      for (size_t at = kSlabBytes; at >= block; at -= block) free.push_back(start + at - block);  // lowest last
    }
    const uintptr_t block = free.back();
    free.pop_back();
    return reinterpret_cast<void*>(block);
  }
  const size_t units = (bytes + kSlabBytes - 1) / kSlabBytes;
  if (auto reused = freeRuns_.find(units); reused != freeRuns_.end()) {
    const uintptr_t start = reused->second;
    freeRuns_.erase(reused);
    return reinterpret_cast<void*>(start);
  }
  const int segment = carveLocked(units, -1);
  return segment < 0 ? nullptr : reinterpret_cast<void*>(segments_[static_cast<size_t>(segment)].start);
}

void RegisteredHeap::releaseLocked(uintptr_t block) noexcept {
  Segment* segment = segmentOfLocked(block);
  if (segment == nullptr) return;  // (not one of ours: not reached)
  if (segment->sizeClass >= 0)
    freeBlocks_[static_cast<size_t>(segment->sizeClass)].push_back(block);
  else
    freeRuns_.emplace(segment->length / kSlabBytes, segment->start);
}

size_t RegisteredHeap::blockSizeLocked(uintptr_t block) const noexcept {
  const int32_t index = segmentOfUnit_[(block - base_) / kSlabBytes];
  if (index < 0) return 0;
  const Segment& segment = segments_[static_cast<size_t>(index)];
  return segment.sizeClass >= 0 ? classBytes(static_cast<size_t>(segment.sizeClass)) : segment.length;
}

int RegisteredHeap::carveLocked(size_t units, int sizeClass) noexcept {
  if (carved_ + units > segmentOfUnit_.size()) return -1;
  const uintptr_t start = base_ + carved_ * kSlabBytes;
  const size_t length = units * kSlabBytes;
  if (::mprotect(reinterpret_cast<void*>(start), length, PROT_READ | PROT_WRITE) != 0) return -1;
  Segment segment;
  segment.start = start;
  segment.length = length;
  segment.sizeClass = sizeClass;
  segments_.push_back(std::move(segment));
  const auto index = static_cast<int32_t>(segments_.size() - 1);
  for (size_t unit = carved_; unit < carved_ + units; ++unit) segmentOfUnit_[unit] = index;
  carved_ += units;
  return index;
}

RegisteredHeap::Segment* RegisteredHeap::segmentOfLocked(uintptr_t address) noexcept {
  if (address < base_ || address >= base_ + reserved_) return nullptr;
  const int32_t index = segmentOfUnit_[(address - base_) / kSlabBytes];
  return index < 0 ? nullptr : &segments_[static_cast<size_t>(index)];
}

bool RegisteredHeap::lkeyFor(ibv_pd* pd, const void* at, size_t length, uint32_t& lkey) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(at);
  if (pd == nullptr || !contains(at)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Segment* segment = segmentOfLocked(address);
  if (segment == nullptr || address + length > segment->start + segment->length) return false;
  for (const auto& [domain, region] : segment->registrations) {
    if (domain == pd) {
      lkey = region->lkey;
      return true;
    }
  }
  // Local access only: the device reads what it sends.
  ibv_mr* region = ibv_reg_mr(pd, reinterpret_cast<void*>(segment->start), segment->length, 0);
  if (region == nullptr) return false;
  segment->registrations.emplace_back(pd, region);
  registeredBytes_ += segment->length;
  lkey = region->lkey;
  return true;
}

void RegisteredHeap::forget(ibv_pd* pd) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Segment& segment : segments_) {
    auto& registrations = segment.registrations;
    for (auto it = registrations.begin(); it != registrations.end();) {
      if (it->first != pd) {
        ++it;
        continue;
      }
      (void)ibv_dereg_mr(it->second);
      registeredBytes_ -= segment.length;
      it = registrations.erase(it);
    }
  }
}

uint64_t RegisteredHeap::slabBytes() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint64_t>(carved_) * kSlabBytes;
}

uint64_t RegisteredHeap::registeredBytes() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return registeredBytes_;
}

}  // namespace evrdma::detail
