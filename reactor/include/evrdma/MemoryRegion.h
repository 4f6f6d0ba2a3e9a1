/// \file
/// MemoryRegion: registered memory, RAII, with the least access asked for (no remote access unless
/// requested). RemoteRegion: what a peer needs to read or write a region with one-sided RDMA
/// (address, length, rkey, the access granted), as a value that travels on the wire, and the bounds
/// check every access must pass before it is posted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "evrdma/Verbs.h"

namespace evrdma {

/// What a region allows; combine with |.
enum Access : int {
  kLocalWrite = IBV_ACCESS_LOCAL_WRITE,    ///< the local device may write it (receives, read targets)
  kRemoteRead = IBV_ACCESS_REMOTE_READ,    ///< peers may RDMA-read it
  kRemoteWrite = IBV_ACCESS_REMOTE_WRITE,  ///< peers may RDMA-write it (implies kLocalWrite)
};

struct RemoteRegion {
  uint64_t address = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;  ///< kRemoteRead and/or kRemoteWrite, as granted

  static constexpr size_t kWireSize = 24;  ///< address, length (u64), rkey, access (u32); big-endian
  void encode(uint8_t* out) const noexcept;
  /// False if fewer than kWireSize bytes, or the values cannot describe a region (zero length,
  /// address + length wrapping around, unknown access bits, no access at all).
  static bool decode(const uint8_t* data, size_t size, RemoteRegion& out) noexcept;

  /// May [offset, offset + bytes) be read (write = false) or written? 0, -ERANGE (outside the region,
  /// overflow included) or -EACCES (that access was not granted).
  int check(uint64_t offset, uint64_t bytes, bool write) const noexcept;
};

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&& other) noexcept { *this = std::move(other); }
  /// Deregisters what this region held before freeing its memory, then takes `other`'s.
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  ~MemoryRegion() { reset(); }
  /// Deregisters, then frees the memory it owns (in that order: never free registered memory).
  void reset() noexcept;
  /// Registers memory the caller owns (it must outlive the region). Empty + -errno on failure.
  static MemoryRegion wrap(ibv_pd* pd, void* address, size_t length, int access, int& error);
  /// Allocates page-aligned, zeroed memory of `length` bytes and registers it; the region owns it.
  static MemoryRegion allocate(ibv_pd* pd, size_t length, int access, int& error);
  /// Registers the first `length` bytes of an anonymous mapping of `mapped` bytes (mmap, whole
  /// pages), which the region then owns: it unmaps it when it goes (at once if this fails). With
  /// its pages populated beforehand (e.g. MADV_POPULATE_WRITE), the registration does not fault
  /// them in: allocate() in two steps, the costly one where the caller chooses.
  static MemoryRegion registerMapping(ibv_pd* pd, void* mapping, size_t mapped, size_t length, int access,
                                      int& error);
  /// [offset, offset + length) of `parent` as a region of its own that shares parent's
  /// registration: its lkey, and its rkey, which reaches all of parent. It owns nothing and must not
  /// outlive parent; its access is `access` (at most parent's). Empty if out of bounds.
  static MemoryRegion view(const MemoryRegion& parent, size_t offset, size_t length, int access);

  explicit operator bool() const noexcept { return mr() != nullptr; }
  uint8_t* data() const noexcept {
    return mr() == nullptr ? nullptr : static_cast<uint8_t*>(mr()->addr) + (viewOf_ != nullptr ? viewOffset_ : 0);
  }
  size_t length() const noexcept { return mr() == nullptr ? 0 : viewOf_ != nullptr ? viewLength_ : mr()->length; }
  uint32_t lkey() const noexcept { return mr() != nullptr ? mr()->lkey : 0; }
  int access() const noexcept { return access_; }
  /// The registration (a view's is its parent's).
  ibv_mr* get() const noexcept { return mr(); }

  /// The region as peers see it; -EACCES (and an empty value) when it grants no remote access.
  int remote(RemoteRegion& out) const noexcept;
  /// Whether [offset, offset + bytes) lies inside the region (overflow-safe).
  bool contains(size_t offset, size_t bytes) const noexcept;

 private:
  struct FreeDeleter {
    FreeDeleter() noexcept : mapped(0) {}
    explicit FreeDeleter(size_t bytes) noexcept : mapped(bytes) {}
    void operator()(uint8_t* p) const noexcept;
    size_t mapped;  ///< bytes mapped (allocate() maps whole pages)
  };
  ibv_mr* mr() const noexcept { return viewOf_ != nullptr ? viewOf_ : mr_.get(); }

  std::unique_ptr<uint8_t[], FreeDeleter> owned_;  ///< declared first: freed after the MR is gone
  MemoryRegionHandle mr_;
  int access_ = 0;
  ibv_mr* viewOf_ = nullptr;  ///< a view: its parent's registration, not ours
  size_t viewOffset_ = 0, viewLength_ = 0;
};

/// A piece of a registered region, for the zero-copy operations of a connection.
struct Slice {
  const MemoryRegion* region = nullptr;
  size_t offset = 0;
  size_t length = 0;
};

}  // namespace evrdma
