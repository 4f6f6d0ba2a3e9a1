// ByteStream's writing: what the program wrote cut into messages at the smaller of the two sides'
// message sizes and copied once, into a registered send buffer, taken straight from the program's
// output while nothing it wrote before waits on the long way (the filter and the pair), else from
// our end's input; a turn's writes leave together; the FIN once every byte before it has gone.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <algorithm>
#include <cerrno>

#include "ByteStream.h"
#include "ByteStreamChecks.h"
#include "RegisteredHeap.h"
#include "StreamPort.h"
#include "evrdma/Connection.h"

namespace evrdma::detail {
namespace {

constexpr uint64_t kDataTag = 0;
constexpr uint64_t kFinTag = 1;
}  // namespace

bufferevent_filter_result ByteStream::passOnceConnected(evbuffer* from, evbuffer* to, ev_ssize_t limit,
                                                        bufferevent_flush_mode mode, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  // Until the connection is up, what the program writes stays in its output evbuffer, and its
  // write callback waits, as a connecting socket's do.
  if (!stream->connected_) return BEV_NEED_MORE;
  // A flush (BEV_FLUSH, BEV_FINISHED) while writing is disabled sends nothing, as a socket's
  // flush does nothing: the bytes wait for the enable. (libevent asks in BEV_NORMAL only while enabled.)
  if (mode != BEV_NORMAL && !bev::writeEnabled(stream->user_, stream->fieldsRead_)) return BEV_NEED_MORE;
  // Already due this turn: the pump looks again at what it may take (a program's many small
  // writes in one turn pay for the checks once), unless the turn's writes have become bulk: then
  // down the long way at once, as writes come (what waits before them goes along, in order).
  // Sent in place, bulk stays on the straight way too (ByteStreamChecks.h).
  if (mode == BEV_NORMAL && stream->pumpIsDue_ &&
      (evbuffer_get_length(from) <= kStraightOutMost || RegisteredHeap::installed()))
    return BEV_NEED_MORE;
  if (mode == BEV_NORMAL && !stream->pumpIsDue_ && stream->straightWayOut()) {
    // It stays in the program's output: the pump takes it from there once the program's callback
    // has returned (a turn's writes leave as one message); while every byte the pump may have out
    // in place is out, once a send of them completes (onSentInPlace).
    if (stream->inPlaceFull_) return BEV_NEED_MORE;
    stream->pumpIsDue_ = true;
    event_active(stream->pumpDue_, EV_WRITE, 0);
    return BEV_NEED_MORE;
  }
  size_t most = limit < 0 ? evbuffer_get_length(from) : static_cast<size_t>(limit);
  bool binds = false, whole = false;
  if (mode == BEV_NORMAL) {
    most = stream->downTheLongWay(from, to, whole);
    if (most == 0) return BEV_NEED_MORE;  // the pump flushes again once it has sent what waits
    // Within the program's write rate limit, a share per pass (the refill resumes writing: see
    // onWriteTimeoutEvent; the next pass, onNextPassDue).
    const ev_ssize_t allowance = bev::writeAllowance(stream->user_, stream->fieldsRead_);
    binds = bev::limitBinds(allowance);
    if (binds) {
      if (allowance <= 0 || stream->writeShareTaken_) return BEV_NEED_MORE;
      if (static_cast<size_t>(allowance) < most) whole = false;  // (cut to the allowance: copied)
      most = std::min(most, static_cast<size_t>(allowance));
    }
  }
  const int moved = evbuffer_remove_buffer(from, to, most);
  if (moved < 0) return BEV_ERROR;
  if (mode == BEV_NORMAL) bev::chargeWrite(stream->user_, static_cast<size_t>(moved), stream->fieldsRead_);
  if (whole && static_cast<size_t>(moved) == most) stream->bytesDownWhole_ += static_cast<size_t>(moved);
  if (binds && moved > 0) stream->tookShare(EV_WRITE);
  return BEV_OK;
}

size_t ByteStream::downTheLongWay(evbuffer* from, evbuffer* to, bool& whole) const noexcept {
  // Whole chains move without a copy: as many as fit, with what waits under the program's end and
  // in our end's input, in our end's window (its read watermark), which the pair then moves on
  // whole. Cut to the window, a chain would be copied in pieces, twice (here and in the pair).
  const size_t window = std::max<size_t>(options_.sendWindow, 1);
  const size_t waiting = evbuffer_get_length(oursIn_) + evbuffer_get_length(to);
  const size_t room = window > waiting ? window - waiting : 0;
  constexpr int kLook = 8;
  evbuffer_iovec chains[kLook];
  const int count = std::min(evbuffer_peek(from, -1, nullptr, chains, kLook), kLook);
  size_t fitting = 0;
  for (int i = 0; i < count && fitting + chains[i].iov_len <= room; ++i) fitting += chains[i].iov_len;
  whole = fitting > 0;
  if (whole) return fitting;
  if (count > 0 && chains[0].iov_len <= window) return 0;  // it fits once what waits has gone
  // Never fits: in pieces (copied), no more than kHeldUnderProgram under the program's end.
  const size_t held = evbuffer_get_length(to);
  return held < kHeldUnderProgram ? kHeldUnderProgram - held : 0;
}

void ByteStream::onWriteTimeoutEvent(evutil_socket_t fd, short what, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  bufferevent* end = stream->user_;
  if (end == nullptr) return;  // let go of (its events are deleted with it: not reached)
  if (stream->shutdownUntold_) {  // the Reactor went (onReactorGone), and the loop runs again
    stream->shutdownUntold_ = false;
    // What was due before, first.
    if (stream->pairRunMovedToHook_ && stream->userPair_ != nullptr) bev::rescheduleRun(stream->userPair_);
    if (stream->runMovedToHook_) bev::rescheduleRun(end);
    stream->runMovedToHook_ = stream->pairRunMovedToHook_ = false;
    stream->tellProgram(BEV_EVENT_ERROR, ESHUTDOWN);
    return;
  }
  if (!bev::firedForEnableMark(end)) {
    // The program's write timeout ran out. A socket's runs only while written bytes wait in its
    // output (its write event goes once the output is empty); a filter restarts its timeout as
    // bytes pass and leaves it running after the last: with nothing waiting, it is not told.
    if (evbuffer_get_length(stream->userOut_) > 0) stream->ownTimeoutCallback_(fd, what, stream->ownTimeoutArg_);
    return;
  }
  // Writing was enabled again (or the filter passed bytes on): what waits in the program's output
  // goes now, as a socket's end writes it once writable, the way a write would send it.
  if (bev::writeEnabled(end, stream->fieldsRead_) && evbuffer_get_length(stream->userOut_) > 0)
    (void)bufferevent_flush(end, EV_WRITE, BEV_NORMAL);
}

void ByteStream::onPumpDue(evutil_socket_t, short, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  stream->pumpIsDue_ = false;
  stream->pump();
}

void ByteStream::pump() noexcept {
  if (!connected_ || connection_ == nullptr || finSent_) return;
  // Whether the program may be told: unchanged through the pump, which calls nothing of the
  // program's (its callbacks are deferred), so asked once (each ask is a call into libevent).
  const bool reachable = programReachable();
  if (enableHooked_ && reachable) bev::keepEnableMark(user_);  // cleared with the program's timeouts
  Connection& c = *connection_;
  evbuffer* const longWay = oursIn_;
  const size_t most = messageMost_;
  StreamPort port(c);
  bool tookStraight = false;
  // Once open, the straight way stays open through the pump: the program writes nothing meanwhile,
  // and with its output the only bytes waiting, nothing comes down the long way either.
  bool straight = false;
  evbuffer* input = longWay;
  blocked_ = false;
  // A turn's messages go to the device together, in one post; a lone message (the common case of
  // a program's small writes) is posted at once, without the batch's queueing.
  bool batched = false;
  bool sentOne = false;
  // What the program's write rate limit lets the straight way take (the long way's bytes were
  // charged as they passed the filter); asked once, when the straight way opens.
  ev_ssize_t allowance = 0;
  bool limited = false;
  const bool inPlace = RegisteredHeap::installed();  // libevent's chains are registered memory
  while (true) {
    // What came the long way goes first; then, with nothing left there, the program's output.
    if (!straight && straightWayOut(reachable)) {
      straight = true;
      input = userOut_;
      allowance = bev::writeAllowance(user_, fieldsRead_);
      limited = bev::limitBinds(allowance);
    }
    if (inPlace) {
      // Sent in place first (ByteStreamInPlace.cpp): what was taken already, then whole chains of
      // the heap's from the long way or the program's output, while no FIN is wanted (and, on
      // the straight way, no write rate limit binds: those bytes are copied within its allowance).
      if (!batched) {
        c.beginBatch();
        batched = true;
      }
      size_t sent = 0, took = 0;
      const InPlace step = sendInPlace(port, input, !finWanted_ && !(straight && limited), sent, took);
      if (straight && took > 0) {  // (also when nothing of it could be posted yet: Full)
        tookStraight = true;
        bev::chargeWrite(user_, took, fieldsRead_);  // (the long way's bytes were charged as they passed the filter)
      }
      if (step == InPlace::Sent) {
        taken_ += sent;
        sentOne = true;
        if (straight) ++messagesStraightOut_;
        continue;
      }
      if (step == InPlace::Full) inPlaceFull_ = true;  // onOpDone pumps again
      if (step != InPlace::Copy || unpostedInPlace_ > 0) break;
    }
    const size_t available = evbuffer_get_length(input);
    size_t length = std::min(available, most);
    if (straight && limited && !finWanted_) {
      if (allowance <= 0 || writeShareTaken_) break;  // the refill resumes writing (onWriteTimeoutEvent), the next pass (onNextPassDue)
      length = std::min(length, static_cast<size_t>(allowance));
    }
    if (finWanted_) {
      // After a half-close: what the program wrote before it, then the FIN (length 0).
      const uint64_t owed = finAt_ - taken_;
      if (owed > 0 && available == 0) break;  // the rest is on its way down to our end
      length = static_cast<size_t>(std::min<uint64_t>(length, owed));
    } else if (available == 0) {
      break;
    }
    if (!batched && (sentOne || available > length || finWanted_)) {
      c.beginBatch();
      batched = true;
    }
    // A send buffer first, then the bytes moved into it from the evbuffer (the one copy), then
    // the send: each a call down, none a call back.
    StreamPort::SendSpace space;
    int rc = port.takeSendSpace(length, space);
    if (rc == -ENOBUFS) {
      blocked_ = true;  // every send buffer is in use: onWritable comes once one is free
      break;
    }
    if (rc != 0) break;  // not connected any more: onError or onClosed follows
    if (length > 0) (void)evbuffer_remove(input, space.data, length);
    rc = port.send(space, length, length == 0 ? kFinTag : kDataTag);
    if (rc != 0) break;  // the connection fails: onError follows
    taken_ += length;
    if (length == 0) {
      finSent_ = true;
      break;
    }
    sentOne = true;
    if (straight) {
      tookStraight = true;
      ++messagesStraightOut_;
      bev::chargeWrite(user_, length, fieldsRead_);
      if (limited) tookShare(EV_WRITE);
      allowance -= static_cast<ev_ssize_t>(length);
      if (length == available && !finWanted_) break;  // the program's output is empty: it writes nothing meanwhile
    }
  }
  if (batched) (void)c.endBatch();
  if (reachable) {
    if (tookStraight) {
      // The program's write callback, at its low watermark, as the filter calls it when it passes bytes on.
      bufferevent_trigger(user_, EV_WRITE, 0);
    } else if (connected_ && !finSent_ && !straightWayOut(reachable) && bev::writeEnabled(user_, fieldsRead_) &&
               evbuffer_get_length(userOut_) > 0) {
      // What the straight way left in the program's output, now closed to it (a write timeout was
      // set meanwhile, or the turn's writes grew past kStraightOutMost), goes the long way.
      (void)bufferevent_flush(user_, EV_WRITE, BEV_NORMAL);
    }
  }
  // Take more from the program only while it can go out: else it waits in the program's output.
  const bool takeMore = !blocked_ && !inPlaceFull_ && !finSent_ && connected_;
  if (takeMore != oursReading_) {
    oursReading_ = takeMore;
    if (takeMore)
      bufferevent_enable(ours_, EV_READ);
    else
      bufferevent_disable(ours_, EV_READ);
  }
}

void ByteStream::onProgramWrote(bufferevent*, void* self) { static_cast<ByteStream*>(self)->pump(); }

void ByteStream::onWritable(Connection&) noexcept {
  if (blocked_) pump();
}

void ByteStream::onSendDone(Connection& c, uint64_t tag) noexcept {
  if (tag != kFinTag) return;
  finDone_ = true;
  if (closeOnceFinDone_) c.close();  // everything the program wrote went out, and the FIN after it
}

}  // namespace evrdma::detail
