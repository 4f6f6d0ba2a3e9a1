// ByteStream's reading: what the peer sent handed to the program, straight into its input while
// it reads and nothing waits before it, else down the pair within the receive window (past it
// the peer's credits stop); lent in its receive buffer from lendFrom bytes on, copied below or
// while every spare is lent; EOF after the last byte.
#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include <algorithm>

#include "ByteStream.h"
#include "ByteStreamChecks.h"
#include "ReceiveLoan.h"
#include "StreamPort.h"
#include "evrdma/Connection.h"

namespace evrdma::detail {
bool ByteStream::onStreamBytes(Connection& c, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept {
  if (length == 0) {
    peerFinished_ = true;
    afterDelivery();
    return true;
  }
  if (!programReachable()) {  // nobody reads any more
    if (loan != nullptr) ReceiveLoan::giveBack(data, length, loan);
    return true;
  }
  if (readEnableHooked_) bev::keepReadEnableMark(user_);  // cleared with the program's timeouts
  if (straightWayIn(length)) {
    if (deliverInto(userIn_, data, length, loan)) {
      bev::chargeRead(user_, length, fieldsRead_);
      if (readLimited_) tookShare(EV_READ);
      ++messagesStraightIn_;
      bufferevent_trigger(user_, EV_READ, 0);  // deferred, as the filter's own read callback is
      return true;
    }
    loan = nullptr;  // deliverInto gave it back: copied from here on
  }
  // The pair carries it to the program as it reads (our end's output callback moves it across).
  if (!deliverInto(oursOut_, data, length, loan)) {
    StreamPort(c).fail(-ENOMEM, "evbuffer_add");  // a stream missing bytes must not go on: the program hears ENOMEM
    return true;
  }
  // The window counts both sides of the pair: what the pair moved under the program's end before it
  // stopped reading stays there.
  if (!receivingPaused_ && heldOnTheWayIn() >= options_.receiveWindow) {
    receivingPaused_ = true;  // the connection pauses on our answer: the peer's credits stop, it waits
    return false;
  }
  return true;
}

bool ByteStream::deliverInto(evbuffer* to, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept {
  if (loan != nullptr) {
    if (evbuffer_add_reference(to, data, length, ReceiveLoan::giveBack, loan) == 0) {
      bytesLent_ += length;
      return true;
    }
    // Not added (libevent calls no cleanup then): given back, and copied below before the
    // connection can take the buffer as a spare again (it does so on this thread, later).
    ReceiveLoan::giveBack(data, length, loan);
  }
  if (evbuffer_add(to, data, length) != 0) return false;
  bytesCopied_ += length;
  return true;
}

bufferevent_filter_result ByteStream::passWithinReadLimit(evbuffer* from, evbuffer* to, ev_ssize_t limit,
                                                          bufferevent_flush_mode mode, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  size_t most = limit < 0 ? evbuffer_get_length(from) : static_cast<size_t>(limit);
  bool binds = false;
  if (mode == BEV_NORMAL) {
    const ev_ssize_t allowance = bev::readAllowance(stream->user_, stream->fieldsRead_);
    binds = bev::limitBinds(allowance);
    if (binds) most = allowance > 0 && !stream->readShareTaken_ ? std::min(most, static_cast<size_t>(allowance)) : 0;
  }
  const int moved = most > 0 ? evbuffer_remove_buffer(from, to, most) : 0;
  if (moved < 0) return BEV_ERROR;
  if (mode == BEV_NORMAL) bev::chargeRead(stream->user_, static_cast<size_t>(moved), stream->fieldsRead_);
  if (binds && moved > 0) stream->tookShare(EV_READ);
  if (binds && evbuffer_get_length(from) > 0) {
    // The rate limit holds the rest back. Where the bucket is spent, the program's end has stopped
    // reading (libevent suspends it, and with it the pair's end under it) until the refill resumes
    // it; else the share of this pass is taken (tookShare). The pair moves bytes across only when
    // our end's output has some, so the rest goes back there.
    evbuffer_unfreeze(stream->oursOut_, 1);  // the pair keeps its front frozen between moves
    (void)evbuffer_prepend_buffer(stream->oursOut_, from);
    evbuffer_freeze(stream->oursOut_, 1);
  }
  return moved > 0 ? BEV_OK : BEV_NEED_MORE;
}

void ByteStream::onReadTimeoutEvent(evutil_socket_t fd, short what, void* arg) {
  // The argument is the program's end (see hookReadEnable); the stream is our end's callback
  // argument, our end the partner of the pair's end under it.
  auto* end = static_cast<bufferevent*>(arg);
  bufferevent* under = bufferevent_get_underlying(end);
  bufferevent* ours = under != nullptr ? bufferevent_pair_get_partner(under) : nullptr;
  auto* stream = ours != nullptr ? static_cast<ByteStream*>(ours->cbarg) : nullptr;
  if (stream == nullptr || stream->user_ != end || stream->userPair_ == nullptr) return;  // let go of
  if (!bev::firedForReadEnableMark(end)) {
    stream->ownReadTimeoutCallback_(fd, what, stream->ownReadTimeoutArg_);  // the program's read timeout ran out
    return;
  }
  // Reading enabled again (by the program, or as a watermark or a rate limit let it resume). What
  // reached the pair's end under the program's end while it did not read stays there: libevent's
  // filter takes it only as more arrives, and the peer may have sent its last. A socket's end
  // reads what waits in its socket once enabled: this end takes what waits under it.
  if (!bev::readEnabled(end, stream->fieldsRead_)) return;
  if (evbuffer_get_length(stream->pairIn_) > 0)
    bufferevent_trigger(stream->userPair_, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
  else
    stream->afterDelivery();  // an EOF held while the program did not read
}

void ByteStream::onDeliveredChanged(evbuffer*, const evbuffer_cb_info* info, void* self) {
  if (info->n_deleted > 0) static_cast<ByteStream*>(self)->afterDelivery();
}

void ByteStream::afterDelivery() noexcept {
  if (!programReachable()) return;
  const size_t held = heldOnTheWayIn();
  if (receivingPaused_ && held <= options_.receiveWindow / 2 && connection_ != nullptr) {
    receivingPaused_ = false;
    (void)connection_->resumeReceiving();
  }
  // EOF after the last byte: once none is left on its way to the program's input (what reached
  // the pair's end under it has been handed on: its read callback runs before this event's), and
  // while the program reads: a socket's end finds EOF only by reading (with the read hook, the
  // enable calls this again).
  if (peerFinished_ && !eofTold_ && held == 0 &&
      (!readEnableHooked_ || bev::readEnabled(user_, fieldsRead_))) {
    eofTold_ = true;
    tellProgram(BEV_EVENT_EOF | BEV_EVENT_READING, 0);
  }
}

}  // namespace evrdma::detail
