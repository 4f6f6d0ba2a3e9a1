// ByteStream: the program's bufferevent over a framed connection: the pair and filter made for
// it, the connection's news handed to the stream, and what the program is told (its events, its
// figures). What the program wrote going out is in ByteStreamWriting.cpp, what the peer sent
// coming in in ByteStreamReading.cpp, how a stream ends (the program's free, the half-close, the
// Reactor lingering or going) in ByteStreamEnd.cpp.
#include "ByteStream.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/bufferevent.h>
#include <event2/util.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "ByteStreamChecks.h"
#include "LingeringHandler.h"
#include "ReactorCore.h"
#include "ReceiveLoan.h"
#include "StreamPort.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {
namespace {

using bev::inputOf;
using bev::outputOf;

}  // namespace

class ByteStream::Handler final : public LingeringHandler, public StreamReceiver {
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
  // The connection hands the stream its messages here (StreamPort::deliverTo, once established).
  bool onStreamBytes(Connection& c, const uint8_t* data, size_t length, ReceiveLoan* loan) noexcept override {
    if (stream_ != nullptr) return stream_->onStreamBytes(c, data, length, loan);
    if (loan != nullptr) ReceiveLoan::giveBack(data, length, loan);  // nobody reads any more
    return true;
  }
  void onRecv(Connection& c, const uint8_t* data, size_t length) noexcept override {
    if (!onStreamBytes(c, data, length, nullptr)) (void)c.pauseReceiving();  // not reached: see deliverTo
  }
  void onSendDone(Connection& c, uint64_t tag) noexcept override {
    if (stream_ != nullptr) stream_->onSendDone(c, tag);
  }
  void onOpDone(Connection&, const OpCompletion& done) noexcept override {
    if (stream_ != nullptr) (void)stream_->onSentInPlace(done.tag);
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
  stream->fieldsRead_ = bev::fieldsAgree(reactor.base());  // checked once per process: see BuffereventView.h
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
  // connection is up; those it reads within its read rate limit), so that libevent tells us when
  // the program frees it (and frees the pair's end under it).
  stream->user_ = bufferevent_filter_new(pair[0], passWithinReadLimit, passOnceConnected,
                                         BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS, onProgramFreed, stream);
  if (stream->user_ == nullptr) {
    bufferevent_decref(pair[0]);
    bufferevent_free(pair[0]);
    stream->userPair_ = nullptr;
    delete stream;
    error = -ENOMEM;
    return nullptr;
  }
  if (stream->fieldsRead_) {
    stream->enableHooked_ = bev::hookWriteEnable(stream->user_, onWriteTimeoutEvent, stream,
                                                 stream->ownTimeoutCallback_, stream->ownTimeoutArg_);
    stream->readEnableHooked_ = bev::hookReadEnable(stream->user_, onReadTimeoutEvent, stream->ownReadTimeoutCallback_,
                                                    stream->ownReadTimeoutArg_);
  }
  stream->userIn_ = inputOf(stream->user_);
  stream->userOut_ = outputOf(stream->user_);
  stream->pairIn_ = inputOf(pair[0]);
  stream->pairOut_ = outputOf(pair[0]);
  stream->oursIn_ = inputOf(stream->ours_);
  stream->oursOut_ = outputOf(stream->ours_);
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
  cancelResolving();
  if (!reactorGone_) coreOf(reactor_).leave(this);
  if (handler_ != nullptr) handler_->stream_ = nullptr;
  if (pumpDue_ != nullptr) event_free(pumpDue_);
  if (nextPassDue_ != nullptr) event_free(nextPassDue_);
  if (heldPair_ != nullptr) bufferevent_decref(heldPair_);
  if (ours_ != nullptr) freeOurEnd();
  if (sentInPlace_ != nullptr) evbuffer_free(sentInPlace_);  // (the connection is gone: nothing reads it)
  client_.reset();  // frees the client now or after its onClosed (see Client::Release)
}

void ByteStream::freeOurEnd() noexcept {
  // (A run of its callbacks the Reactor's going left scheduled, it took off the base: onReactorGone.)
  bufferevent_free(ours_);
  ours_ = nullptr;
  oursIn_ = oursOut_ = nullptr;
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
  messageMost_ = std::min<size_t>(c.maxMessageSize(), c.peerMaxMessageSize());  // the peer's came in its hello
  if (handler_ != nullptr)
    StreamPort(c).deliverTo(*handler_, options_.lendFrom != SIZE_MAX ? std::max<size_t>(options_.lendFrom, 1) : 0);
  if (established_) {
    established_(*this, c);  // the listener hands the program its end
  } else {
    tellProgram(BEV_EVENT_CONNECTED, 0);
  }
  pump();
  // What the program wrote while connecting waited in its output evbuffer: the pump took it
  // straight, or it comes down now. (Triggered with nothing left, the pair's end under the
  // program was left unfreed, under ASan, by kv-client, which frees its end after its loop.)
  if (programHoldsItsEnd() && evbuffer_get_length(userOut_) > 0)
    bufferevent_trigger(userPair_, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
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

void ByteStream::tookShare(short what) noexcept {
  if (pumpDue_ == nullptr) return;  // the Reactor is gone (its events with it)
  if (nextPassDue_ == nullptr) nextPassDue_ = evtimer_new(event_get_base(pumpDue_), onNextPassDue, this);
  if (nextPassDue_ == nullptr) return;  // (no memory: shares are taken as they come, within the bucket)
  if ((what & EV_READ) != 0 && !readShareTaken_) {
    readShareTaken_ = true;
    bufferevent_disable(ours_, EV_WRITE);  // the pair moves nothing up to the program's end meanwhile
  }
  if ((what & EV_WRITE) != 0) writeShareTaken_ = true;
  // A timeout of zero: the next pass, after the loop has polled (an activation would run in this
  // pass, before the other streams' deferred callbacks).
  static const timeval kNextPass{0, 0};
  if (!evtimer_pending(nextPassDue_, nullptr)) (void)evtimer_add(nextPassDue_, &kNextPass);
}

void ByteStream::onNextPassDue(evutil_socket_t, short, void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  if (stream->readShareTaken_) {
    stream->readShareTaken_ = false;
    if (stream->ours_ != nullptr) bufferevent_enable(stream->ours_, EV_WRITE);  // the pair moves up what waits
  }
  if (stream->writeShareTaken_) {
    stream->writeShareTaken_ = false;
    // What the program's output holds goes on, as a socket's end writes it when writable again.
    if (stream->programReachable() && bev::writeEnabled(stream->user_, stream->fieldsRead_) &&
        evbuffer_get_length(stream->userOut_) > 0)
      (void)bufferevent_flush(stream->user_, EV_WRITE, BEV_NORMAL);
  }
}

StreamStats ByteStream::stats() const noexcept {
  StreamStats out;
  out.connected = connected_;
  out.waitingForPeer = blocked_ || inPlaceFull_;
  out.receivingPaused = receivingPaused_;
  out.heldForProgram = ours_ != nullptr ? evbuffer_get_length(oursOut_) : 0;
  if (programHoldsItsEnd()) out.heldForProgram += evbuffer_get_length(pairIn_);
  out.connection = connection_ != nullptr ? connection_->stats() : lastStats_;
  out.bytesLent = bytesLent_;
  out.bytesCopied = bytesCopied_;
  out.buffersLent = connection_ != nullptr ? StreamPort(*connection_).buffersLent() : 0;
  out.messagesStraightIn = messagesStraightIn_;
  out.messagesStraightOut = messagesStraightOut_;
  out.bytesSentInPlace = bytesInPlace_;
  out.bytesWrittenDownWhole = bytesDownWhole_;
  return out;
}

}  // namespace evrdma::detail
