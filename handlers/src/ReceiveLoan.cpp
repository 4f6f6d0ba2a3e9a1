// ReceiveLoan: a lent receive buffer going back to its connection, or, once that is gone, only
// letting go of the ring's memory.
#include "ReceiveLoan.h"

#include "ConnectionReceiver.h"

namespace evrdma::detail {

void ReceiveLoan::giveBack(const void*, size_t, void* loan) noexcept {
  auto* self = static_cast<ReceiveLoan*>(loan);
  if (ConnectionReceiver* receiver = self->desk_->receiver) receiver->onLoanReturned(self->buffer);
  delete self;  // the last loan of a closed connection unmaps its ring
}

}  // namespace evrdma::detail
