/// \file
/// MemoryCharge: bytes counted against a Reactor's memory budget while the charge lives. The
/// application charges what it registers itself (its own MemoryRegions) with Reactor::chargeMemory,
/// so that its regions and evrdma's connections (whose buffers hold charges of the same kind) share
/// one budget. Move-only; it gives its bytes
/// back when it goes or is reset, and may outlive the Reactor (then it gives them to nobody).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

namespace evrdma {

class MemoryAccount;  ///< a Reactor's (not installed)

class MemoryCharge {
 public:
  MemoryCharge() = default;
  /// How a Reactor's account hands out a charge of `bytes` it has counted (Reactor::chargeMemory).
  MemoryCharge(std::shared_ptr<MemoryAccount> account, uint64_t bytes) noexcept
      : account_(std::move(account)), bytes_(bytes) {}
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;
  ~MemoryCharge() { reset(); }

  void reset() noexcept;
  uint64_t bytes() const noexcept { return account_ ? bytes_ : 0; }
  explicit operator bool() const noexcept { return account_ != nullptr; }

 private:
  std::shared_ptr<MemoryAccount> account_;
  uint64_t bytes_ = 0;
};

}  // namespace evrdma
