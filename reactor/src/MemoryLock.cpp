#include "MemoryLock.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace evrdma::detail {
namespace {

std::string kib(uint64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

// A "Name:   value kB" line of /proc/self/status, in bytes; 0 when absent.
uint64_t statusKib(const char* name) noexcept {
  uint64_t value = 0;
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    const size_t length = std::strlen(name);
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, name, length) == 0 && line[length] == ':') {
        unsigned long long kb = 0;
        if (std::sscanf(line + length + 1, "%llu", &kb) == 1) value = kb * 1024;
        break;
      }
    }
    std::fclose(f);
  }
  return value;
}

// CAP_IPC_LOCK (bit 14) in the effective set: the limit does not apply.
bool hasIpcLock() noexcept {
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned long long caps = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "CapEff: %llx", &caps) == 1) break;
    std::fclose(f);
    return (caps & (1ull << 14)) != 0;
  }
  return false;
}

}  // namespace

MemoryLockState currentMemoryLockState() noexcept {
  MemoryLockState state;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) state.limit = limit.rlim_cur;
  state.pinned = statusKib("VmPin");
  state.exempt = hasIpcLock();
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
