// The words for a registration that RLIMIT_MEMLOCK refused, and only for that.
#include "MemoryLock.h"

#include <gtest/gtest.h>

#include <string>

using evrdma::detail::MemoryLockState;
using evrdma::detail::memoryLockHint;

namespace {
constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB;
}

TEST(MemoryLock, ALimitReachedIsNamedWithWhatIsPinnedAndHowManyConnectionsFit) {
  MemoryLockState state{8 * kMiB, 8 * kMiB, false};
  const std::string hint = memoryLockHint(state, 128 * kKiB, 256 * kKiB);
  EXPECT_EQ(hint.rfind("RLIMIT_MEMLOCK reached (8192 of 8192 KiB pinned; a connection pins 256 KiB: the limit holds ~32)", 0),
            0u)
      << hint;
  EXPECT_NE(hint.find("raise ulimit -l"), std::string::npos) << hint;
  EXPECT_LE(hint.find("~32"), 143u - 40u) << "the essentials fit a reject reason after the Listener's prefix";
}

TEST(MemoryLock, NoHintWhenTheLimitDoesNotExplainTheFailure) {
  EXPECT_EQ(memoryLockHint(MemoryLockState{8 * kMiB, 1 * kMiB, false}, 128 * kKiB, 256 * kKiB), "") << "room left";
  EXPECT_EQ(memoryLockHint(MemoryLockState{UINT64_MAX, 100 * kMiB, false}, 128 * kKiB, 256 * kKiB), "") << "unlimited";
  EXPECT_EQ(memoryLockHint(MemoryLockState{8 * kMiB, 8 * kMiB, true}, 128 * kKiB, 256 * kKiB), "") << "CAP_IPC_LOCK";
}
