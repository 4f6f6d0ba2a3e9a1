// ByteStream's end: how a stream ends, from either side of it. The program frees its end (libevent's
// finalizer, or a lingering Reactor before it): what it wrote is taken over and sent, then the FIN,
// then the connection closes; the half-close; the connection ending first; the Reactor lingering,
// then going; and the stream freed once both its program's end and its connection are gone.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>

#include <cerrno>

#include "ByteStream.h"
#include "ByteStreamChecks.h"
#include "StreamPort.h"
#include "evrdma/Connection.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {

void ByteStream::onClosed(Connection& c) noexcept {
  lastStats_ = c.stats();
  connectionEnded();
}

void ByteStream::connectionEnded() noexcept {
  connection_ = nullptr;
  connected_ = false;
  connectionGone_ = true;
  if (!handedOut_ && user_ != nullptr) {
    // An accepted stream whose connection never came up: its end was never the program's.
    freeEndNeverHandedOut();  // onProgramFreed follows, from the loop
    return;
  }
  maybeEnd();
}

void ByteStream::freeEndNeverHandedOut() noexcept {
  bufferevent* end = user_;
  user_ = nullptr;
  userIn_ = userOut_ = nullptr;
  userPair_ = nullptr;
  pairIn_ = pairOut_ = nullptr;
  bufferevent_free(end);
}

void ByteStream::onProgramFreed(void* self) {
  auto* stream = static_cast<ByteStream*>(self);
  stream->endFinalized_ = true;
  if (!stream->programGone_) stream->letGo();  // (a lingering Reactor may have done it before)
  stream->closeWhenSent();
  stream->maybeEnd();
}

void ByteStream::letGo() noexcept {
  programGone_ = true;
  keepWhatTheProgramWrote();
  user_ = nullptr;
  userIn_ = userOut_ = nullptr;
  userPair_ = nullptr;  // freed with the program's end
  pairIn_ = pairOut_ = nullptr;
}

void ByteStream::dropProgramEndsIdleRun() noexcept {
  // Freed by the program with a run of its callbacks scheduled: the run's reference holds the end
  // until the loop's next pass, and event_base_free, which may come first, drops it unrun.
  if (user_ != nullptr) (void)bev::dropIdleDeferredRun(user_, fieldsRead_);
}

void ByteStream::beforeLinger() noexcept {
  // From now on the program is not told anything: its loop does not run, and each deferred
  // callback scheduled now would hold a reference on its bufferevent that event_base_free drops
  // unrun (the bufferevent leaks). What arrives meanwhile is discarded; our end's read callback
  // goes too (the completions drive the pump).
  reactorLingers_ = true;
  dropProgramEndsIdleRun();
  if (ours_ != nullptr) bufferevent_setcb(ours_, nullptr, nullptr, nullptr, nullptr);
  if (!connected_ || connection_ == nullptr) return;  // still connecting (or gone): dropped, as a socket's
  if (!programGone_ && !programHoldsItsEnd()) {
    // Freed since the loop last ran: libevent finalizes the program's end (onProgramFreed) only
    // in a later turn, or in event_base_free, after the Reactor. Its buffers are still there.
    letGo();
  } else if (programHoldsItsEnd()) {
    // The program still holds its end, and runs no more meanwhile: what it wrote goes as if it
    // had freed it (it hears ESHUTDOWN if its loop runs again).
    moveWrittenToOurEnd(userPair_, user_);
  }
  closeWhenSent();  // the rest, the FIN, then the disconnect
}

bool ByteStream::lingering() const noexcept {
  return closeOnceFinDone_ && connection_ != nullptr && !StreamPort(*connection_).doneWithPeer();
}

void ByteStream::keepWhatTheProgramWrote() noexcept {
  if (heldPair_ == nullptr) return;
  bufferevent* under = heldPair_;
  heldPair_ = nullptr;
  // The program's end is being finalized (this runs from its destructor, or from a lingering
  // Reactor before that; its buffers are still there) and pair[0] lives on by our reference (and
  // the filter's): what waited in either goes after what our end took already.
  if (ours_ != nullptr && !connectionGone_) moveWrittenToOurEnd(under, user_);
  bufferevent_setcb(under, nullptr, nullptr, nullptr, nullptr);  // its callbacks were the filter's
  (void)bev::dropIdleDeferredRun(under, fieldsRead_);  // a run still scheduled calls nothing now (BuffereventView.h)
  bufferevent_decref(under);
}

void ByteStream::moveWrittenToOurEnd(bufferevent* under, bufferevent* program) noexcept {
  evbuffer* to = bufferevent_get_input(ours_);
  evbuffer* underOutput = bufferevent_get_output(under);
  evbuffer_unfreeze(to, 0);
  evbuffer_unfreeze(underOutput, 1);
  evbuffer_add_buffer(to, underOutput);
  if (program != nullptr) evbuffer_add_buffer(to, bufferevent_get_output(program));
  evbuffer_freeze(underOutput, 1);
  evbuffer_freeze(to, 0);
}

void ByteStream::closeWhenSent() noexcept {
  if (resolving_ != nullptr) {  // freed while its host name was looked up: no connection will come
    cancelResolving();
    connectionGone_ = true;
    return;
  }
  if (connection_ == nullptr) {
    if (client_ && !connectionGone_) client_->close();  // still connecting
    return;
  }
  closeOnceFinDone_ = true;
  if (!finWanted_) {
    finWanted_ = true;
    finAt_ = taken_ + unpostedInPlace_ + evbuffer_get_length(bufferevent_get_input(ours_));
  }
  if (finDone_) {
    connection_->close();
    return;
  }
  pump();  // what the program wrote before, then the FIN; closed once the FIN's send completes
}

int ByteStream::shutdownWrite() noexcept {
  if (finWanted_) return -EALREADY;
  if (connectionGone_ || !programHoldsItsEnd()) return -ENOTCONN;
  finWanted_ = true;
  // Every byte the program wrote so far goes first, wherever it waits: its output evbuffer, the
  // pair's end under it, our end's input. (A flush would not do: libevent's pair moves no more
  // than our end's read watermark.)
  finAt_ = taken_ + unpostedInPlace_ + evbuffer_get_length(bufferevent_get_input(ours_)) +
           evbuffer_get_length(bufferevent_get_output(userPair_)) + evbuffer_get_length(bufferevent_get_output(user_));
  pump();
  return 0;
}

void ByteStream::maybeEnd() noexcept {
  if (!endFinalized_ || !connectionGone_ || ending_) return;
  ending_ = true;
  if (reactorGone_) {
    delete this;
    return;
  }
  reactor_.defer([this] { delete this; });
}

void ByteStream::cancelResolving() noexcept {
  evdns_getaddrinfo_request* request = resolving_;
  resolving_ = nullptr;
  if (request != nullptr) evdns_getaddrinfo_cancel(request);  // its callback hears EVUTIL_EAI_CANCEL
}

void ByteStream::failBeforeConnecting(int err, int dnsError) noexcept {
  connectionGone_ = true;  // none will come: the stream ends once the program frees its end
  if (dnsError != 0 && user_ != nullptr) bev::setDnsError(user_, dnsError, fieldsRead_);
  tellProgram(BEV_EVENT_ERROR, err);
}

void ByteStream::onReactorGone() noexcept {
  // The connection is a closed shell now and says nothing more; the program still holds its end.
  reactorGone_ = true;
  reactorLingers_ = false;
  dropProgramEndsIdleRun();  // (if it did not linger)
  cancelResolving();
  if (pumpDue_ != nullptr) event_free(pumpDue_);  // before the base it is on
  pumpDue_ = nullptr;
  if (nextPassDue_ != nullptr) event_free(nextPassDue_);
  nextPassDue_ = nullptr;
  connected_ = false;
  connection_ = nullptr;
  connectionGone_ = true;
  // Freed by the program since the loop last ran, and no linger let go of it: let go now, while
  // the pair's end under it has its run (if any) scheduled still (its finalizer may come only in
  // event_base_free, after that dropped the run unrun).
  if (!programGone_ && handedOut_ && user_ != nullptr && !programHoldsItsEnd()) letGo();
  // A run of our end's callbacks would only pump, which ends here.
  if (ours_ != nullptr) (void)bev::unscheduleRun(ours_, fieldsRead_);
  if (enableHooked_ && handedOut_ && programHoldsItsEnd()) {
    // Told from its end's own write-timeout event, on the loop's next pass, after the runs of its
    // callbacks and of the pair's end under it still scheduled (moved there too): a run scheduled
    // holds a reference on its end, which event_base_free drops unrun, and a program that frees
    // its end and then its base with no pass between would leak both ends and this stream.
    shutdownUntold_ = true;
    runMovedToHook_ = bev::unscheduleRun(user_, fieldsRead_);
    pairRunMovedToHook_ = bev::unscheduleRun(userPair_, fieldsRead_);
    bev::activateWriteHook(user_);
  } else {
    tellProgram(BEV_EVENT_ERROR, ESHUTDOWN);  // (nothing, to an accepted stream not handed out)
  }
  // An accepted stream whose connection was not up yet: its end was never the program's, and no
  // onClosed will free it.
  const bool neverHandedOut = !handedOut_ && user_ != nullptr;
  // Nothing will move through our end again. Freed now, while the base runs no finalizer: from
  // inside the program's end's finalizer (onProgramFreed, which event_base_free may run), its
  // own finalization was at times never run, and both ends of the pair leaked.
  if ((programGone_ || neverHandedOut) && ours_ != nullptr) freeOurEnd();
  if (neverHandedOut) {
    freeEndNeverHandedOut();  // its finalizer deletes the stream, in a later turn or in event_base_free
    return;
  }
  // A delete scheduled with defer() was dropped with the Reactor's deferred closures.
  if (endFinalized_) delete this;
}

}  // namespace evrdma::detail
