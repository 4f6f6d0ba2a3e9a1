// MemoryCharge: giving its bytes back to the Reactor's budget when it goes.
#include "evrdma/MemoryCharge.h"

#include <utility>

#include "MemoryAccount.h"

namespace evrdma {

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : account_(std::move(other.account_)), bytes_(other.bytes_) {}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    reset();
    account_ = std::move(other.account_);
    bytes_ = other.bytes_;
  }
  return *this;
}

void MemoryCharge::reset() noexcept {
  if (account_) account_->give(bytes_);
  account_.reset();
}

}  // namespace evrdma
