// BufferMemory: a block from the small-buffer arena or a region of its own, chosen by size.
#include "BufferMemory.h"

#include <sys/mman.h>

#include <cerrno>

namespace evrdma::detail {

int BufferMemory::allocate(SmallBufferArena* arena, MemoryAccount& account, ibv_pd* pd, size_t bytes, int access,
                           PreparedMappings* prepared) noexcept {
  int error = 0;
  // The arena registers for local write: enough for anything but remote access.
  if (arena != nullptr && SmallBufferArena::serves(bytes) && (access & ~kLocalWrite) == 0) {
    lease_ = arena->take(bytes, error);
  } else if ((error = account.charge(pinnedBytes(bytes, false), charge_)) == 0) {
    size_t mapped = 0;
    void* mapping = prepared != nullptr ? prepared->take(bytes, mapped) : nullptr;
    if (mapping == nullptr) mapping = mapPages(bytes, mapped);
    if (mapping == nullptr) {
      charge_.reset();
      return -ENOMEM;
    }
    memory_ = std::shared_ptr<void>(mapping, [mapped](void* memory) { munmap(memory, mapped); });
    region_ = MemoryRegion::wrap(pd, mapping, bytes, access, error);
    if (!region_) {
      memory_.reset();
      charge_.reset();
    }
  }
  data_ = lease_ ? lease_.data() : region_.data();
  lkey_ = lease_ ? lease_.lkey() : region_.lkey();
  return error;
}

size_t BufferMemory::pinnedBytes(size_t bytes, bool arena) noexcept {
  if (arena && SmallBufferArena::serves(bytes)) return SmallBufferArena::blockSize(bytes);
  const size_t page = 4096;
  return (bytes + page - 1) / page * page;
}

}  // namespace evrdma::detail
