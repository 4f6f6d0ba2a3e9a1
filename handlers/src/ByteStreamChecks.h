// The checks a byte stream makes on every message (may the bytes take the straight way past the
// pair and the filter, is the program still there), inline in each room that makes them: each is
// a few reads of libevent's fields (BuffereventView.h), and a call apiece cost a 64 B round trip
// ~50 instructions. Declared, with what each means, in ByteStream.h.
#pragma once

#include <event2/buffer.h>

#include "BuffereventView.h"
#include "ByteStream.h"
#include "RegisteredHeap.h"

namespace evrdma::detail {

// The most a program's output may hold for the pump to take it straight from there. Bulk writes
// go the long way: taken from the program's output, their evbuffer chains fill and free in a
// pattern that made glibc's heap fault in fresh pages for most of the bytes (17 000 minor faults
// against 5 500 for 64 MiB in 64 KiB writes, 14 % more CPU per GB); moved down the pair, they do not.
constexpr size_t kStraightOutMost = 16 << 10;

// What the pair's end under the program's bufferevent holds of a write too big for our end's
// window (cut into pieces of it, copied), past which the program's own output evbuffer keeps the
// rest (as a socket's does). Chains that fit the window go down whole (ByteStream::passOnceConnected).
constexpr size_t kHeldUnderProgram = 16 << 10;

inline bool ByteStream::programHoldsItsEnd() const noexcept {
  // While userPair_ is set we hold a reference on it (heldPair_): the pair stays linked.
  if (programGone_ || userPair_ == nullptr) return false;
  // When the program's end loses its last reference (bufferevent_free, or the deferred callback
  // that ran when it freed it), libevent unlinks the filter at once: the pair's end under it loses
  // its callbacks. Its finalizer (our onProgramFreed) runs later, and until then our reference
  // keeps the pair linked: a trigger on the program's end in between would finalize it twice.
  return bev::hasReadCallback(userPair_, fieldsRead_);
}

inline bool ByteStream::programReachable() const noexcept { return !reactorLingers_ && programHoldsItsEnd(); }

inline size_t ByteStream::heldOnTheWayIn() const noexcept {
  return evbuffer_get_length(oursOut_) + evbuffer_get_length(pairIn_);
}

inline bool ByteStream::longWayEmpty() const noexcept { return heldOnTheWayIn() == 0; }

inline bool ByteStream::straightWayIn(size_t length) noexcept {
  if (!handedOut_ || !bev::readEnabled(user_, fieldsRead_) || !longWayEmpty()) return false;
  if (bev::hasReadTimeout(user_)) return false;
  const size_t high = bev::readHighWatermark(user_, fieldsRead_);
  if (high != 0 && evbuffer_get_length(userIn_) + length > high) return false;
  const ev_ssize_t allowance = bev::readAllowance(user_, fieldsRead_);
  readLimited_ = bev::limitBinds(allowance);
  return !readLimited_ || (!readShareTaken_ && static_cast<ev_ssize_t>(length) <= allowance);
}

inline bool ByteStream::straightWayOut(bool reachable) const noexcept {
  if (!connected_ || !reachable || !bev::writeEnabled(user_, fieldsRead_)) return false;
  if (bev::hasWriteTimeout(user_)) return false;
  if (evbuffer_get_length(oursIn_) != 0 || evbuffer_get_length(pairOut_) != 0) return false;
  // Sent in place, bulk goes straight too: the heap's chains are taken whole, neither copied nor
  // handed back to glibc (the pump sends what it took in place before anything else).
  return evbuffer_get_length(userOut_) <= kStraightOutMost || RegisteredHeap::installed();
}

inline bool ByteStream::straightWayOut() const noexcept { return straightWayOut(programReachable()); }

}  // namespace evrdma::detail
