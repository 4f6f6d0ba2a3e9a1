// ReceiveLoan: a receive buffer of a framed connection lent out of it, so that its bytes reach a
// program without a copy (a byte stream puts them in the program's input evbuffer with
// evbuffer_add_reference). The buffer left the receive ring in exchange for a spare one
// (ConnectionOptions::spareRecvBuffers), so the receive was posted again at once and the peer's
// credits do not wait for the program. Given back (that evbuffer chain's cleanup: the program
// drained the bytes), the buffer goes to the connection's LoanDesk, from which the connection
// takes it as a spare again on its own thread: the cleanup runs wherever the chain is freed, and
// evbuffers may cross threads. The loans hold the ring's memory, so the bytes stay readable after
// the connection and the Reactor are gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace evrdma::detail {

// What the loans of one connection share: the ring's memory, and the buffers given back.
class LoanDesk {
 public:
  // `most`: how many can be lent at once (the spares), so giving back never allocates.
  LoanDesk(std::shared_ptr<void> memory, size_t most) : memory_(std::move(memory)) { returned_.reserve(most); }

  // From any thread.
  void giveBack(uint32_t buffer) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    returned_.push_back(buffer);
  }
  // On the connection's thread: `each(buffer)` for every buffer given back since the last call.
  template <typename Each>
  void collect(Each&& each) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t buffer : returned_) each(buffer);
    returned_.clear();
  }
  size_t waiting() const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return returned_.size();
  }

 private:
  std::shared_ptr<void> memory_;  // the receive ring's pages
  mutable std::mutex mutex_;
  std::vector<uint32_t> returned_;
};

class ReceiveLoan {
 public:
  ReceiveLoan(std::shared_ptr<LoanDesk> desk, uint32_t buffer) noexcept : desk_(std::move(desk)), buffer_(buffer) {}

  // An evbuffer_ref_cleanup_cb, from any thread: the buffer goes back to its desk and `loan` is
  // deleted (the last loan of a closed connection unmaps its ring).
  static void giveBack(const void* data, size_t length, void* loan) noexcept;

 private:
  std::shared_ptr<LoanDesk> desk_;
  uint32_t buffer_;  // which buffer of the ring
};

}  // namespace evrdma::detail
