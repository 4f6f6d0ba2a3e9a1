// ReceiveLoan: a lent receive buffer going back to its connection's desk.
#include "ReceiveLoan.h"

namespace evrdma::detail {

void ReceiveLoan::giveBack(const void*, size_t, void* loan) noexcept {
  auto* self = static_cast<ReceiveLoan*>(loan);
  self->desk_->giveBack(self->buffer_);
  delete self;
}

}  // namespace evrdma::detail
