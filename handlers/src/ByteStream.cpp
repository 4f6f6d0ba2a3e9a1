// ByteStream: the program's bufferevent over a framed connection: the pair and filter made for
// it, what the program wrote cut into messages (one copy, into the send buffer), what the peer
// sent handed to the program within the receive window, the FIN both ways and the events. How a
// stream ends (the program's free, the half-close, the Reactor lingering or going) is in
// ByteStreamEnd.cpp.
#include "ByteStream.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/bufferevent.h>
#include <event2/util.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "BuffereventView.h"
#include "LingeringHandler.h"
#include "ReceiveLoan.h"
#include "ReactorCore.h"
#include "StreamPort.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {
namespace {

constexpr uint64_t kDataTag = 0;
constexpr uint64_t kFinTag = 1;
// What the pair's end under the program's bufferevent holds of what the program wrote, past
// which the program's own output evbuffer keeps the rest (as a socket's does).
constexpr size_t kHeldUnderProgram = 16 << 10;
// The most a program's output may hold for the pump to take it straight from there. Bulk writes
// go the long way: taken from the program's output, their evbuffer chains fill and free in a
// pattern that made glibc's heap fault in fresh pages for most of the bytes (17 000 minor faults
// against 5 500 for 64 MiB in 64 KiB writes, 14 % more CPU per GB); moved down the pair, they do not.
constexpr size_t kStraightOutMost = 16 << 10;

using bev::inputOf;
using bev::outputOf;

void takeFrom(void* input, uint8_t* to, size_t length) {
  (void)evbuffer_remove(static_cast<evbuffer*>(input), to, length);
}

}  // namespace

class ByteStream::Handler final : public LingeringHandler {
 public:
  explicit Handler(ByteStream& stream) : stream_(&stream) {}
  explicit Handler(std::function<ByteStream*(Connection&)> make) : stream_(nullptr), make_(std::move(make)) {}
  ~Handler() override {
    if (stream_ == nullptr) return;
    // The connection is gone (after onClosed, or it never started): so is the stream's use of it.
    stream_->handler_ = nullptr;
    stream_->connectionEnded();
  }
  void onEstablished(Connection& c) noexcept override {
    if (make_) {
      stream_ = make_(c);
      make_ = nullptr;
      if (stream_ == nullptr) {
        c.close();
        return;
      }
      stream_->handler_ = this;
      stream_->connectionGone_ = false;
    }
    if (stream_ != nullptr) stream_->onEstablished(c);
  }
  void onRecv(Connection& c, const uint8_t* data, size_t length) noexcept override {
    if (stream_ != nullptr) stream_->onRecv(c, data, length);
  }
  void onSendDone(Connection& c, uint64_t tag) noexcept override {
    if (stream_ != nullptr) stream_->onSendDone(c, tag);
  }
  void onWritable(Connection& c) noexcept override {
    if (stream_ != nullptr) stream_->onWritable(c);
  }
  void onDisconnected(Connection& c) noexcept override {
    if (stream_ != nullptr) stream_->onDisconnected(c);
  }
  void onRejected(Connection& c, const RejectInfo& info) noexcept override {
    if (stream_ != nullptr) stream_->onRejected(c, info);
  }
  void onError(Connection& c, int err, const char* op) noexcept override {
    if (stream_ != nullptr) stream_->onError(c, err, op);
  }
  void onClosed(Connection& c) noexcept override {
    if (stream_ != nullptr) stream_->onClosed(c);  // may end the stream
  }
  ByteStream* stream_;
  std::function<ByteStream*(Connection&)> make_;  // until established: makes stream_
};

ByteStream::ByteStream(Reactor& reactor, const StreamOptions& options) : reactor_(reactor), options_(options) {
  options_.connection.framed = true;
}

ClientOptions ByteStream::connectionOptions(const StreamOptions& options) noexcept {
  ClientOptions connection = options.connection;
  connection.framed = true;
  connection.spareRecvBuffers = options.lendFrom == SIZE_MAX ? 0 : options.lendingBuffers;
  return connection;
}

ByteStream* ByteStream::create(Reactor& reactor, const StreamOptions& options, int& error) noexcept {
  error = 0;
  if (reactor.base() == nullptr) {
    error = -ESHUTDOWN;
    return nullptr;
  }
  auto* stream = new (std::nothrow) ByteStream(reactor, options);
  if (stream == nullptr) {
    error = -ENOMEM;
    return nullptr;
  }
  stream->pumpDue_ = event_new(reactor.base(), -1, 0, onPumpDue, stream);
  if (stream->pumpDue_ == nullptr) {
    delete stream;
    error = -ENOMEM;
    return nullptr;
  }
  bufferevent* pair[2] = {nullptr, nullptr};
  if (bufferevent_pair_new(reactor.base(), BEV_OPT_DEFER_CALLBACKS, pair) != 0) {
    delete stream;
    error = -ENOMEM;
    return nullptr;
  }
  stream->userPair_ = pair[0];
  stream->ours_ = pair[1];
  // Held until onProgramFreed: what the program wrote and its end still held when it freed it
  // (in pair[0]'s output) is taken from there, and sent.
  bufferevent_incref(pair[0]);
  stream->heldPair_ = pair[0];
  // The program's end: a filter that passes the bytes through unchanged (those it writes once the
  // connection is up), so that libevent tells us when the program frees it (and frees the pair's
  // end under it).
  stream->user_ = bufferevent_filter_new(pair[0], nullptr, passOnceConnected,
                                         BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS, onProgramFreed, stream);
  if (stream->user_ == nullptr) {
    bufferevent_decref(pair[0]);
    bufferevent_free(pair[0]);
    stream->userPair_ = nullptr;
    delete stream;
    error = -ENOMEM;
    return nullptr;
  }
  bufferevent_setwatermark(pair[0], EV_WRITE, 0, kHeldUnderProgram);
  bufferevent_setwatermark(stream->ours_, EV_READ, 0, std::max<size_t>(options.sendWindow, 1));
  bufferevent_setcb(stream->ours_, onProgramWrote, nullptr, nullptr, stream);
  evbuffer_add_cb(outputOf(stream->ours_), onDeliveredChanged, stream);
  evbuffer_add_cb(inputOf(pair[0]), onDeliveredChanged, stream);
  // Reading what the program wrote waits until the connection is up (see pump).
  bufferevent_enable(stream->ours_, EV_WRITE);
  coreOf(reactor).join(stream);
  return stream;
}

ByteStream::~ByteStream() {
  if (!reactorGone_) coreOf(reactor_).leave(this);
  if (handler_ != nullptr) handler_->stream_ = nullptr;
  if (pumpDue_ != nullptr) event_free(pumpDue_);
  if (heldPair_ != nullptr) bufferevent_decref(heldPair_);
  if (ours_ != nullptr) bufferevent_free(ours_);
  client_.reset();  // frees the client now or after its onClosed (see Client::Release)
}

ByteStream* ByteStream::of(bufferevent* bev) noexcept {
  if (bev == nullptr) return nullptr;
  bufferevent* under = bufferevent_get_underlying(bev);
  bufferevent* ours = under != nullptr ? bufferevent_pair_get_partner(under) : nullptr;
  if (ours == nullptr) return nullptr;
  bufferevent_data_cb readcb = nullptr;
  void* arg = nullptr;
  bufferevent_getcb(ours, &readcb, nullptr, nullptr, &arg);
  if (readcb != onProgramWrote) return nullptr;
  auto* stream = static_cast<ByteStream*>(arg);
  return stream->user_ == bev ? stream : nullptr;
}

std::unique_ptr<ConnectionHandler> ByteStream::handlerMakingStream(std::function<ByteStream*(Connection&)> make) {
  return std::make_unique<Handler>(std::move(make));
}

std::unique_ptr<ConnectionHandler> ByteStream::makeHandler() {
  auto handler = std::make_unique<Handler>(*this);
  handler_ = handler.get();
  connectionGone_ = false;
  return handler;
}

void ByteStream::onEstablished(Connection& c) noexcept {
  connection_ = &c;
  connected_ = true;
  if (options_.lendFrom != SIZE_MAX) StreamPort(c).lendFrom(std::max<size_t>(options_.lendFrom, 1));
  if (established_) {
    established_(*this, c);  // the listener hands the program its end
  } else {
    tellProgram(BEV_EVENT_CONNECTED, 0);
  }
  pump();
  // What the program wrote while connecting waited in its output evbuffer: the pump took it
  // straight, or it comes down now. (Triggered with nothing left, the pair's end under the
  // program was left unfreed, under ASan, by kv-client, which frees its end after its loop.)
  if (programHoldsItsEnd() && evbuffer_get_length(outputOf(user_)) > 0)
    bufferevent_trigger(userPair_, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
}

bufferevent_filter_result ByteStream::passOnceConnected(evbuffer* from, evbuffer* to, ev_ssize_t limit,
                                                        bufferevent_flush_mode mode, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  // Until the connection is up, what the program writes stays in its output evbuffer, and its
  // write callback waits, as a connecting socket's do.
  if (!stream->connected_) return BEV_NEED_MORE;
  // Already due this turn: the pump looks again at what it may take (a program's many small
  // writes in one turn pay for the checks once), unless the turn's writes have become bulk: then
  // down the long way at once, as writes come (what waits before them goes along, in order).
  if (mode == BEV_NORMAL && stream->pumpIsDue_ && evbuffer_get_length(from) <= kStraightOutMost) return BEV_NEED_MORE;
  if (mode == BEV_NORMAL && !stream->pumpIsDue_ && stream->straightWayOut()) {
    // It stays in the program's output: the pump takes it from there once the program's callback
    // has returned (a turn's writes leave as one message).
    stream->pumpIsDue_ = true;
    event_active(stream->pumpDue_, EV_WRITE, 0);
    return BEV_NEED_MORE;
  }
  const size_t most = limit < 0 ? evbuffer_get_length(from) : static_cast<size_t>(limit);
  return evbuffer_remove_buffer(from, to, most) >= 0 ? BEV_OK : BEV_ERROR;
}

bool ByteStream::straightWayOut() const noexcept {
  if (!connected_ || !programReachable() || !bev::writeEnabled(user_)) return false;
  if (bev::hasWriteTimeout(user_)) return false;
  return evbuffer_get_length(inputOf(ours_)) == 0 &&
         evbuffer_get_length(outputOf(userPair_)) == 0 &&
         evbuffer_get_length(outputOf(user_)) <= kStraightOutMost;
}

void ByteStream::onPumpDue(evutil_socket_t, short, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  stream->pumpIsDue_ = false;
  stream->pump();
}

void ByteStream::pump() noexcept {
  if (!connected_ || connection_ == nullptr || finSent_) return;
  Connection& c = *connection_;
  evbuffer* const longWay = inputOf(ours_);
  const size_t most = std::min<size_t>(c.maxMessageSize(), c.peerMaxMessageSize());
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
  while (true) {
    // What came the long way goes first; then, with nothing left there, the program's output.
    if (!straight && straightWayOut()) {
      straight = true;
      input = outputOf(user_);
    }
    const size_t available = evbuffer_get_length(input);
    size_t length = std::min(available, most);
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
    const int rc = port.send(length, takeFrom, input, length == 0 ? kFinTag : kDataTag);
    if (rc == -ENOBUFS) {
      blocked_ = true;  // every send buffer is in use: onWritable comes once one is free
      break;
    }
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
    }
  }
  if (batched) (void)c.endBatch();
  if (programReachable()) {
    if (tookStraight) {
      // The program's write callback, at its low watermark, as the filter calls it when it passes bytes on.
      bufferevent_trigger(user_, EV_WRITE, 0);
    } else if (connected_ && !finSent_ && !straightWayOut() && bev::writeEnabled(user_) &&
               evbuffer_get_length(outputOf(user_)) > 0) {
      // What the straight way left in the program's output, now closed to it (a write timeout was
      // set meanwhile, or the turn's writes grew past kStraightOutMost), goes the long way.
      (void)bufferevent_flush(user_, EV_WRITE, BEV_NORMAL);
    }
  }
  // Take more from the program only while it can go out: else it waits in the program's output.
  const bool takeMore = !blocked_ && !finSent_ && connected_;
  if (takeMore != bev::readEnabled(ours_)) {
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

void ByteStream::onRecv(Connection& c, const uint8_t* data, size_t length) noexcept {
  if (length == 0) {
    peerFinished_ = true;
    afterDelivery();
    return;
  }
  if (!programReachable()) return;  // nobody reads any more
  if (straightWayIn(length) && deliverInto(c, inputOf(user_), data, length)) {
    ++messagesStraightIn_;
    bufferevent_trigger(user_, EV_READ, 0);  // deferred, as the filter's own read callback is
    return;
  }
  // The pair carries it to the program as it reads (our end's output callback moves it across).
  if (!deliverInto(c, outputOf(ours_), data, length)) {
    StreamPort(c).fail(-ENOMEM, "evbuffer_add");  // a stream missing bytes must not go on: the program hears ENOMEM
    return;
  }
  if (!receivingPaused_ && evbuffer_get_length(outputOf(ours_)) >= options_.receiveWindow) {
    receivingPaused_ = c.pauseReceiving() == 0;  // the peer's credits stop: it waits
  }
}

bool ByteStream::deliverInto(Connection& c, evbuffer* to, const uint8_t* data, size_t length) noexcept {
  if (length >= options_.lendFrom && lend(c, to, data, length)) return true;
  if (evbuffer_add(to, data, length) != 0) return false;
  bytesCopied_ += length;
  return true;
}

bool ByteStream::lend(Connection& c, evbuffer* to, const uint8_t* data, size_t length) noexcept {
  ReceiveLoan* loan = StreamPort(c).lendDelivering();  // null once lendingBuffers are all lent
  if (loan == nullptr) return false;
  if (evbuffer_add_reference(to, data, length, ReceiveLoan::giveBack, loan) != 0) {
    // Not added (libevent calls no cleanup then): given back, and copied by the caller before the
    // connection can take the buffer as a spare again (it does so on this thread, later).
    ReceiveLoan::giveBack(data, length, loan);
    return false;
  }
  bytesLent_ += length;
  return true;
}

bool ByteStream::longWayEmpty() const noexcept {
  return evbuffer_get_length(outputOf(ours_)) == 0 &&
         evbuffer_get_length(inputOf(userPair_)) == 0;
}

bool ByteStream::straightWayIn(size_t length) const noexcept {
  if (!handedOut_ || !bev::readEnabled(user_) || !longWayEmpty()) return false;
  if (bev::hasReadTimeout(user_)) return false;
  const size_t high = bev::readHighWatermark(user_);
  return high == 0 || evbuffer_get_length(inputOf(user_)) + length <= high;
}

void ByteStream::onDeliveredChanged(evbuffer*, const evbuffer_cb_info* info, void* self) {
  if (info->n_deleted > 0) static_cast<ByteStream*>(self)->afterDelivery();
}

void ByteStream::afterDelivery() noexcept {
  if (!programReachable()) return;
  const size_t held = evbuffer_get_length(outputOf(ours_));
  if (receivingPaused_ && held <= options_.receiveWindow / 2 && connection_ != nullptr) {
    receivingPaused_ = false;
    (void)connection_->resumeReceiving();
  }
  // EOF after the last byte: once none is left on its way to the program's input (what reached
  // the pair's end under it has been handed on: its read callback runs before this event's).
  if (peerFinished_ && !eofTold_ && held == 0 && evbuffer_get_length(inputOf(userPair_)) == 0) {
    eofTold_ = true;
    tellProgram(BEV_EVENT_EOF | BEV_EVENT_READING, 0);
  }
}

bool ByteStream::programReachable() const noexcept { return !reactorLingers_ && programHoldsItsEnd(); }

bool ByteStream::programHoldsItsEnd() const noexcept {
  // While userPair_ is set we hold a reference on it (heldPair_): the pair stays linked.
  if (programGone_ || userPair_ == nullptr) return false;
  // When the program's end loses its last reference (bufferevent_free, or the deferred callback
  // that ran when it freed it), libevent unlinks the filter at once: the pair's end under it loses
  // its callbacks. Its finalizer (our onProgramFreed) runs later, and until then our reference
  // keeps the pair linked: a trigger on the program's end in between would finalize it twice.
  return bev::hasReadCallback(userPair_);
}

void ByteStream::tellProgram(short what, int err) noexcept {
  if (!handedOut_ || !programReachable()) return;
  // Both ends' callbacks are deferred: libevent keeps this errno for the program's callback.
  EVUTIL_SET_SOCKET_ERROR(err);
  // With nothing on the long way, to the program's end itself: after bytes that went straight in,
  // the event joins their pending read callback and runs after it, in the same deferred call (a
  // program that frees its end and leaves the loop from its read callback leaves no event behind,
  // as over a socket). Else through the pair, behind what is on its way.
  bufferevent_trigger_event(longWayEmpty() ? user_ : userPair_, what, 0);
}

void ByteStream::onDisconnected(Connection&) noexcept {
  connected_ = false;
  // Gone without a FIN: its process died or its Reactor went, not a close.
  if (!peerFinished_) tellProgram(BEV_EVENT_ERROR | BEV_EVENT_READING, ECONNRESET);
}

void ByteStream::onRejected(Connection&, const RejectInfo&) noexcept { tellProgram(BEV_EVENT_ERROR, ECONNREFUSED); }

void ByteStream::onError(Connection&, int err, const char*) noexcept {
  connected_ = false;
  tellProgram(BEV_EVENT_ERROR, -err);
}

StreamStats ByteStream::stats() const noexcept {
  StreamStats out;
  out.connected = connected_;
  out.waitingForPeer = blocked_;
  out.receivingPaused = receivingPaused_;
  out.heldForProgram = ours_ != nullptr ? evbuffer_get_length(outputOf(ours_)) : 0;
  if (programHoldsItsEnd()) out.heldForProgram += evbuffer_get_length(inputOf(userPair_));
  out.connection = connection_ != nullptr ? connection_->stats() : lastStats_;
  out.bytesLent = bytesLent_;
  out.bytesCopied = bytesCopied_;
  out.buffersLent = connection_ != nullptr ? StreamPort(*connection_).buffersLent() : 0;
  out.messagesStraightIn = messagesStraightIn_;
  out.messagesStraightOut = messagesStraightOut_;
  return out;
}

}  // namespace evrdma::detail
