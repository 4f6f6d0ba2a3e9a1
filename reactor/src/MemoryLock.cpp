// MemoryLock: what RLIMIT_MEMLOCK allows and what is pinned, to name the cause of a failed
// registration.
#include "MemoryLock.h"

#include <sys/resource.h>

#include <cstdio>

namespace evrdma::detail {
namespace {

std::string kib(uint64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

}  // namespace

MemoryLockState currentMemoryLockState() noexcept {
  MemoryLockState state;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) state.limit = limit.rlim_cur;
  // VmPin: what this process has pinned; CapEff bit 14: CAP_IPC_LOCK, which lifts the limit.
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned long long kb = 0, caps = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "VmPin: %llu", &kb) == 1) state.pinned = kb * 1024;
      if (std::sscanf(line, "CapEff: %llx", &caps) == 1) state.exempt = (caps & (1ull << 14)) != 0;
    }
    std::fclose(f);
  }
  return state;
}

std::string memoryLockHint(const MemoryLockState& state, uint64_t more, uint64_t perConnection) {
  if (state.exempt || state.limit == UINT64_MAX || state.pinned + more <= state.limit) return "";
  // The essentials first: a reject reason carries only the first 143 bytes.
  std::string text = "RLIMIT_MEMLOCK reached (" + std::to_string(state.pinned / 1024) + " of " + kib(state.limit) +
                     " pinned";
  if (perConnection > 0)
    text += "; a connection pins " + kib(perConnection) + ": the limit holds ~" +
            std::to_string(state.limit / perConnection);
  else
    text += "; " + kib(more) + " more asked";
  text += "): raise ulimit -l, or use a smaller maxMessageSize, recvDepth or sendDepth";
  return text;
}

}  // namespace evrdma::detail
