// MemoryLock: why a registration failed, when the reason is RLIMIT_MEMLOCK. Registered memory is
// pinned and counts against the process's RLIMIT_MEMLOCK (8 MiB by default on Debian) unless the
// process has CAP_IPC_LOCK (root has); past it ibv_reg_mr fails with a bare ENOMEM.
#pragma once

#include <cstdint>
#include <string>

namespace evrdma::detail {

struct MemoryLockState {
  uint64_t limit = UINT64_MAX;  // RLIMIT_MEMLOCK (soft), bytes; UINT64_MAX: unlimited
  uint64_t pinned = 0;          // already pinned by this process (VmPin), bytes
  bool exempt = false;          // CAP_IPC_LOCK: the limit does not apply
};

// The process's state now (getrlimit, /proc/self/status, capabilities).
MemoryLockState currentMemoryLockState() noexcept;

// If pinning `more` bytes (one connection's worth: `perConnection`) is what the limit refused,
// the words for it, essentials first (a reject reason carries 143 bytes): what is pinned of the
// limit, how many such connections fit, and what to do.
// "" when the limit does not explain the failure.
std::string memoryLockHint(const MemoryLockState& state, uint64_t more, uint64_t perConnection);

}  // namespace evrdma::detail
