// MemoryAccount: the memory one Reactor's connections have registered (their own buffers, the
// shared small-buffer slabs, the regions lent to peers) against the Reactor's budget
// (Reactor::setMemoryBudget), and what the application charges to it (Reactor::chargeMemory). One
// charge type for both, the public MemoryCharge: it gives its bytes back when it goes, and holds
// the account by shared_ptr, so it may outlive the Reactor (the account is always made shared).
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include "evrdma/MemoryCharge.h"

namespace evrdma {

// In evrdma, not detail: MemoryCharge.h names it (opaque there).
class MemoryAccount : public std::enable_shared_from_this<MemoryAccount> {
 public:
  // 0: no budget of our own (the process's RLIMIT_MEMLOCK still applies).
  void setBudget(uint64_t bytes) noexcept { budget_ = bytes; }
  uint64_t budget() const noexcept { return budget_; }
  uint64_t registered() const noexcept { return registered_; }
  bool fits(uint64_t bytes) const noexcept { return budget_ == 0 || registered_ + bytes <= budget_; }
  // Counts `bytes` as registered if they fit the budget; false (nothing counted) if not.
  bool take(uint64_t bytes) noexcept {
    if (!fits(bytes)) return false;
    registered_ += bytes;
    return true;
  }
  void give(uint64_t bytes) noexcept { registered_ -= bytes; }
  // Takes `bytes` into `out`, which gives them back when it goes. 0, or -ENOBUFS past the budget
  // (`out` left empty).
  int charge(uint64_t bytes, MemoryCharge& out) noexcept;

  // The words for a refusal of `more` bytes (one connection's worth: `perConnection`), essentials
  // first (a reject reason carries 143 bytes).
  std::string refusal(uint64_t more, uint64_t perConnection) const;

 private:
  uint64_t budget_ = 0;
  uint64_t registered_ = 0;
};

namespace detail {
using evrdma::MemoryAccount;

// Charges `bytes` to `account` (null: nothing to charge, `out` left empty). 0, or -ENOBUFS past
// its budget.
inline int chargeTo(MemoryAccount* account, uint64_t bytes, MemoryCharge& out) noexcept {
  out.reset();
  return account == nullptr ? 0 : account->charge(bytes, out);
}

}  // namespace detail
}  // namespace evrdma
