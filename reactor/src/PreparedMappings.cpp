// PreparedMappings: mapping large buffers and faulting in their pages a piece per loop turn.
#include "PreparedMappings.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace evrdma::detail {

namespace {
size_t pageSize() noexcept { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
}  // namespace

void* mapPages(size_t length, size_t& mapped) noexcept {
  const size_t page = pageSize();
  if (length == 0 || length > SIZE_MAX - page) return nullptr;
  mapped = (length + page - 1) / page * page;
  void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

PreparedMappings::~PreparedMappings() {
  for (const Block& block : blocks_)
    if (block.memory != nullptr) munmap(block.memory, block.mapped);
}

int PreparedMappings::map(const std::vector<size_t>& lengths) noexcept {
  for (size_t length : lengths) {
    size_t mapped = 0;
    void* memory = mapPages(length, mapped);
    if (memory == nullptr) return -ENOMEM;
    blocks_.push_back(Block{memory, length, mapped, 0});
    mapped_ += mapped;
  }
  return 0;
}

size_t PreparedMappings::populate(size_t bytes) noexcept {
  const size_t page = pageSize(), wanted = std::max(bytes, page);
  size_t done = 0;
  for (Block& block : blocks_) {
    if (done >= wanted) break;
    if (block.memory == nullptr || block.populated == block.mapped) continue;
    const size_t piece = std::min(block.mapped - block.populated, (wanted - done + page - 1) / page * page);
    auto* start = static_cast<uint8_t*>(block.memory) + block.populated;
    // Kernels before 5.14 know no MADV_POPULATE_WRITE: a write to each page does the same.
    if (madvise(start, piece, MADV_POPULATE_WRITE) != 0)
      for (size_t offset = 0; offset < piece; offset += page) static_cast<volatile uint8_t*>(start)[offset] = 0;
    block.populated += piece;
    populated_ += piece;
    done += piece;
  }
  return done;
}

void* PreparedMappings::take(size_t length, size_t& mapped) noexcept {
  for (Block& block : blocks_) {
    if (block.memory == nullptr || block.length != length) continue;
    void* memory = block.memory;
    mapped = block.mapped;
    block.memory = nullptr;
    return memory;
  }
  return nullptr;
}

}  // namespace evrdma::detail
