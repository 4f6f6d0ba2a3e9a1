// MemoryAccount: charging registered memory to the Reactor's budget, and the words for a refusal.
#include "MemoryAccount.h"

#include <cerrno>
#include <string>

#include "evrdma/MemoryCharge.h"

namespace evrdma {
namespace {

std::string kib(uint64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

}  // namespace

int MemoryAccount::charge(uint64_t bytes, MemoryCharge& out) noexcept {
  out.reset();
  if (!take(bytes)) return -ENOBUFS;
  out = MemoryCharge(shared_from_this(), bytes);  // always owned by a shared_ptr (the Reactor's)
  return 0;
}

std::string MemoryAccount::refusal(uint64_t more, uint64_t perConnection) const {
  // The essentials first: a reject reason carries only the first 143 bytes.
  std::string text = "memory budget: " + std::to_string(registered_ / 1024) + " of " + kib(budget_) + " in use";
  if (perConnection > 0)
    text += ", a connection needs " + kib(perConnection) + ", the budget holds ~" +
            std::to_string(budget_ / perConnection);
  else
    text += ", " + kib(more) + " more asked";
  text += " (Reactor::setMemoryBudget; or a smaller maxMessageSize, recvDepth, sendDepth)";
  return text;
}

}  // namespace evrdma
