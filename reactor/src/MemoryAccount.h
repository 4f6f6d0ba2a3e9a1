// MemoryAccount: the memory one Reactor's connections have registered (their own buffers, the
// shared small-buffer slabs, the regions lent to peers) against the Reactor's budget
// (Reactor::setMemoryBudget). Charges are RAII: a Charge gives its bytes back when it goes.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

namespace evrdma::detail {

class MemoryAccount {
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

  // The words for a refusal of `more` bytes (one connection's worth: `perConnection`), essentials
  // first (a reject reason carries 143 bytes).
  std::string refusal(uint64_t more, uint64_t perConnection) const;

 private:
  uint64_t budget_ = 0;
  uint64_t registered_ = 0;
};

// Bytes charged to an account while the Charge lives.
class Charge {
 public:
  Charge() = default;
  Charge(Charge&& other) noexcept : account_(other.account_), bytes_(other.bytes_) { other.account_ = nullptr; }
  Charge& operator=(Charge&& other) noexcept {
    if (this != &other) {
      reset();
      account_ = other.account_;
      bytes_ = other.bytes_;
      other.account_ = nullptr;
    }
    return *this;
  }
  Charge(const Charge&) = delete;
  Charge& operator=(const Charge&) = delete;
  ~Charge() { reset(); }
  void reset() noexcept {
    if (account_ != nullptr) account_->give(bytes_);
    account_ = nullptr;
  }
  // Charges `bytes` to `account` (null: nothing to charge). 0, or -ENOBUFS past its budget.
  static int take(MemoryAccount* account, uint64_t bytes, Charge& out) noexcept {
    out.reset();
    if (account == nullptr) return 0;
    if (!account->take(bytes)) return -ENOBUFS;
    out.account_ = account;
    out.bytes_ = bytes;
    return 0;
  }

 private:
  MemoryAccount* account_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace evrdma::detail
