// ReceiveLoan: a receive buffer of a framed connection lent out of it, so that its bytes reach a
// program without a copy (a byte stream puts them in the program's input evbuffer with
// evbuffer_add_reference). The buffer left the receive ring in exchange for a spare one
// (ConnectionOptions::spareRecvBuffers), so the receive was posted again at once and the peer's
// credits do not wait for the program; the loan given back (that evbuffer chain's cleanup: the
// program drained the bytes), the buffer is a spare again. The loan holds the ring's memory, so
// the bytes stay readable after the connection and the Reactor are gone; a loan given back then
// only lets go of the memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace evrdma::detail {

class ConnectionReceiver;

// What the loans of one connection share.
struct LoanDesk {
  ConnectionReceiver* receiver = nullptr;  // null once the connection is gone
  std::shared_ptr<void> memory;            // the receive ring's memory
};

class ReceiveLoan {
 public:
  explicit ReceiveLoan(std::shared_ptr<LoanDesk> desk) noexcept : desk_(std::move(desk)) {}

  // An evbuffer_ref_cleanup_cb: the buffer goes back to its connection and `loan` is deleted.
  static void giveBack(const void* data, size_t length, void* loan) noexcept;

  uint32_t buffer = 0;  // which buffer of the ring

 private:
  std::shared_ptr<LoanDesk> desk_;
};

}  // namespace evrdma::detail
