// ByteStream, sending in place: where the program opted in (evrdma_use_registered_memory), its
// evbuffer chains come from the RegisteredHeap, and what it wrote goes out straight from them,
// with no copy into a send buffer. The pump takes each chain whole off the front of what it sends
// from (evbuffer_remove_buffer moves whole chains without copying) into sentInPlace_, where the
// chain stays, untouched and unfreed, until the sends of all its bytes have completed: libevent
// would otherwise free it (or hand its memory to the next write) while the device still reads it.
// What the chains hold goes out in messages of up to the message size, in order, before anything
// behind them; at most as many bytes are out at once as the copy path's send buffers hold (or a
// send window, if more).
#include <event2/buffer.h>

#include <algorithm>
#include <cerrno>

#include "ByteStream.h"
#include "ByteStreamChecks.h"
#include "RegisteredHeap.h"
#include "StreamPort.h"

namespace evrdma::detail {

namespace {

// A message sent in place carries its length in its tag, over the pump's own two (data, FIN).
constexpr uint64_t kInPlaceMark = 2;
constexpr uint64_t tagOf(size_t length) noexcept { return (static_cast<uint64_t>(length) << 2) | kInPlaceMark; }

}  // namespace

ByteStream::InPlace ByteStream::sendInPlace(StreamPort& port, evbuffer* input, bool takeMore, size_t& sent,
                                            size_t& taken) noexcept {
  sent = taken = 0;
  RegisteredHeap* heap = RegisteredHeap::installed() ? RegisteredHeap::instance() : nullptr;
  if (heap == nullptr) return InPlace::Copy;
  if (unpostedInPlace_ == 0) {
    if (!takeMore) return InPlace::Copy;
    // The front chain of what waits, whole, if its memory is the heap's.
    evbuffer_iovec front{};
    if (evbuffer_peek(input, -1, nullptr, &front, 1) < 1 || front.iov_len == 0) return InPlace::Copy;
    uint32_t lkey = 0;  // (the whole chain's: every message cut from it below is sent under it)
    if (!heap->lkeyFor(port.protectionDomain(), front.iov_base, front.iov_len, lkey)) return InPlace::Copy;
    if (sentInPlace_ == nullptr && (sentInPlace_ = evbuffer_new()) == nullptr) return InPlace::Copy;
    if (evbuffer_remove_buffer(input, sentInPlace_, front.iov_len) != static_cast<int>(front.iov_len))
      return InPlace::Copy;  // (not reached: moved whole)
    unpostedInPlace_ = taken = front.iov_len;
    unpostedLkey_ = lkey;
  }
  // As many bytes out as the copy path's send buffers hold (or the send window, if more).
  const size_t most = std::max(options_.sendWindow, size_t{options_.connection.sendDepth} * messageMost_);
  if (postedInPlace_ > 0 && postedInPlace_ + std::min(unpostedInPlace_, messageMost_) > most)
    return InPlace::Full;  // onOpDone frees room
  // The next message: from where the unposted bytes begin, no further than their chain.
  evbuffer_ptr at{};
  const size_t held = evbuffer_get_length(sentInPlace_);
  if (evbuffer_ptr_set(sentInPlace_, &at, held - unpostedInPlace_, EVBUFFER_PTR_SET) != 0) return InPlace::Copy;
  evbuffer_iovec piece{};
  if (evbuffer_peek(sentInPlace_, -1, &at, &piece, 1) < 1) return InPlace::Copy;
  const size_t length = std::min({piece.iov_len, unpostedInPlace_, messageMost_});
  if (port.sendInPlace(static_cast<const uint8_t*>(piece.iov_base), length, unpostedLkey_, tagOf(length)) != 0)
    return InPlace::Failed;  // the connection fails: onError follows
  unpostedInPlace_ -= length;
  postedInPlace_ += length;
  bytesInPlace_ += length;
  sent = length;
  return InPlace::Sent;
}

bool ByteStream::onSentInPlace(uint64_t tag) noexcept {
  if ((tag & 3) != kInPlaceMark || sentInPlace_ == nullptr) return false;
  const size_t length = static_cast<size_t>(tag >> 2);
  // In order: the bytes at the front, whose chains may be freed now.
  (void)evbuffer_drain(sentInPlace_, length);
  postedInPlace_ -= std::min(postedInPlace_, length);
  if (inPlaceFull_) {
    inPlaceFull_ = false;
    pump();
  }
  return true;
}

}  // namespace evrdma::detail
