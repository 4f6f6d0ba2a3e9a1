// ConnectionTeardown: failures (reported once, then the close), the device going away, the
// Reactor going first, and the close in two steps: rdma_disconnect, then, once DISCONNECTED and
// every flushed work request are back (or disconnectTimeout ran out), every resource released and
// onClosed as the last callback, on a later turn. Every accepted operation gets its onOpDone first.
#include "ConnectionTeardown.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "ConnectionCore.h"
#include "Device.h"
#include "FramedSender.h"
#include "LendingPool.h"
#include "Logging.h"
#include "QueuePair.h"
#include "ReactorCore.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "evrdma/Connection.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {

bool ConnectionTeardown::closing() const noexcept { return isClosing(c_.life_); }
bool ConnectionTeardown::finished() const noexcept { return hasEnded(c_.life_); }
bool ConnectionTeardown::doneWithPeer() const noexcept { return c_.life_ >= Life::FinishScheduled; }

ConnectionTeardown::ConnectionTeardown(ConnectionCore& core)
    : c_(core),
      disconnectTimer_(core.reactor_,
                       [this] {
                         disconnectDone_ = true;  // waited long enough for the peer and the flushes
                         scheduleFinish();
                       }),
      unexplainedFlushTimer_(core.reactor_, [this] {
        fail(-EIO, "the queue pair went to the error state (its work was flushed) and no disconnect followed: "
                   "the device refused an operation of this connection or the peer's (e.g. an RDMA access "
                   "outside a region)");
      }) {}

void ConnectionTeardown::noteUnexplainedFlush() noexcept {
  if (closing() || unexplainedFlushTimer_.active()) return;
  unexplainedFlushTimer_.startOnce(kUnexplainedFlushGrace);
}

void ConnectionTeardown::onCmEvent(const CmEvent& event) noexcept {
  if (event.type == RDMA_CM_EVENT_DISCONNECTED) {
    disconnectDone_ = true;
    if (c_.life_ == Life::AwaitingEstablished) {
      // The client's DREQ came before its RTU: the CM cancelled its REP, and no ESTABLISHED
      // comes. rdma_disconnect answers the DREQ and flushes our work.
      c_.setLife(Life::Disconnecting);
      disconnect();
      return;
    }
    // Our close went first; work posted meanwhile may never return (iWARP): once the CQ is drained
    // past the flush, the close waits no more for it.
    if (onIwarp() && c_.queuePair_ && c_.queuePair_->attachment())
      c_.queuePair_->attachment()->whenDrained([this] { postedWorkNeverReturns(); });
    maybeFinish();
  } else if (event.type == RDMA_CM_EVENT_ESTABLISHED && c_.life_ == Life::AwaitingEstablished) {
    c_.setLife(Life::Disconnecting);  // see begin()
    disconnect();
  } else if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
    onDeviceGone();
  }
}

void ConnectionTeardown::peerDisconnected() noexcept {
  disconnectDone_ = true;
  if (onIwarp()) flushedAll_ = true;  // called once the CQ was drained past DISCONNECTED
  if (closing())
    maybeFinish();
  else
    begin();
}

// The core's answer, kept once the device is known (iWARP has no immediate data).
bool ConnectionTeardown::onIwarp() const noexcept { return c_.id_ && c_.id_->verbs && !c_.supportsImmediateData(); }

void ConnectionTeardown::postedWorkNeverReturns() noexcept {
  // An iWARP device flushes a QP's work when its connection closes, and reports the close after
  // that (soft-iWARP: siw_qp_llp_close, then the CM's upcall): with the CQ drained past
  // DISCONNECTED, every flush is handed out. Work posted after the flush (the loop read the last
  // messages' completions after the device had flushed, and posted their buffers again, or
  // answers) goes into soft-iWARP's queues in user space, which nothing reads again: it never
  // completes. The close waited for the disconnect timer for it (3 s; a lingering Reactor its
  // whole linger). Receives go with the QP, and sends are reported flushed, as after the timer.
  flushedAll_ = true;
  maybeFinish();
}

void ConnectionTeardown::onDeviceGone() noexcept {
  // Every connection on the device hears it (this one too, if its QP exists): onDeviceRemoved.
  if (c_.queuePair_ && c_.queuePair_->device() != nullptr) c_.queuePair_->device()->markRemoved();
  onDeviceRemoved();
}

void ConnectionTeardown::onDeviceRemoved() noexcept {
  // Nothing posted will come back, and the removal waits for our resources: release them now
  // rather than after disconnectTimeout.
  if (deviceGone_ || finished()) return;
  deviceGone_ = true;
  // Also when the connection was already closing because the peer went (the removal may break
  // it from the other end first): the application learns why. Not after its own close().
  if (closing() && !failed_ && !closeRequested_) {
    failed_ = true;
    c_.handler_->onError(c_.facade(), -ENODEV, "device removal: the RDMA device went away");
  }
  fail(-ENODEV, "device removal: the RDMA device went away");
  if (closing()) {
    disconnectDone_ = true;
    scheduleFinish();
  }
}

void ConnectionTeardown::failLater(int err, const char* op) noexcept {
  if (closing()) return;
  failed_ = true;
  if (error_ == 0) error_ = err;
  logFailure(err, op);
  // The caller is inside one of our calls (postSend, endBatch...): it gets the error as the
  // return value, and onError comes after it returned (deferred before the finish, so it precedes
  // onClosed).
  laterErrorText_ = op;
  c_.reactor_.defer([this, err] { c_.handler_->onError(c_.facade(), err, laterErrorText_.c_str()); });
  begin();
}

void ConnectionTeardown::fail(int err, const char* op) noexcept {
  if (closing()) return;
  failed_ = true;
  if (error_ == 0) error_ = err;
  logFailure(err, op);
  c_.handler_->onError(c_.facade(), err, op);
  begin();
}

void ConnectionTeardown::logFailure(int err, const char* op) const noexcept {
  EVRDMA_LOG(LogLevel::Info, "%s %s failed: %s: %s", c_.isClient_ ? "client of" : "agent for",
             c_.peerAddress_.c_str(), op, strerror(-err));
}

void ConnectionTeardown::close() noexcept {
  if (!closing()) closeRequested_ = true;
  begin();
}

void ConnectionTeardown::reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept {
  // Copied sends used evrdma's own buffers, and internal frames are evrdma's: nothing to give back.
  if (c_.orphaned() || op.internal || op.copySlot >= 0) return;
  c_.handler_->onOpDone(c_.facade(), OpCompletion{op.tag, op.type, status, op.sge.length});
}

void ConnectionTeardown::begin() noexcept {
  if (closing()) return;
  // A receive may have come before the ESTABLISHED event (and failed the connection): the peer
  // is connected, and only a disconnect tells it.
  const bool wasConnected = c_.life_ == Life::Established || c_.peerReached_;
  c_.setLife(Life::Disconnecting);
  c_.stopLivenessChecks();
  unexplainedFlushTimer_.cancel();
  c_.receiver.dropHeld();
  // Never posted: nothing to wait for. Reported as flushed just before onClosed, in the order
  // issued (the send queue's backlog is older than what waits for credits).
  if (SendQueue* queue = c_.queuePair_ ? c_.queuePair_->sendQueue() : nullptr)
    for (const SendOp& op : queue->takeBacklog()) {
      c_.tally_.add(&ConnectionStats::requestsDropped);
      dropped_.push_back(op);
    }
  if (c_.framedSender_)
    for (const SendOp& op : c_.framedSender_->stop()) {
      c_.tally_.add(&ConnectionStats::requestsDropped);
      dropped_.push_back(op);
    }
  if (!wasConnected || !c_.queuePair_ || !c_.queuePair_->hasQp() || deviceGone_) {
    // Nothing established: destroying the id cancels a resolution or a pending connect.
    disconnectDone_ = true;
    scheduleFinish();
    return;
  }
  disconnectTimer_.startOnce(c_.options_.disconnectTimeout);  // whatever happens, the end comes
  if (!c_.isClient_ && !c_.cmEstablished_ && !disconnectDone_) {
    // An agent whose client was heard before the CM said ESTABLISHED (its RTU on its way): the CM
    // is still waiting for the RTU, and rdma_disconnect would send the client nothing (it would
    // stay connected). The event comes within moments; the disconnect goes then (or the timer
    // ends it all). Once the client's DISCONNECTED came, there is nothing to wait for.
    c_.setLife(Life::AwaitingEstablished);
    return;
  }
  disconnect();
}

void ConnectionTeardown::disconnect() noexcept {
  // Moves the QP to the error state, which flushes every posted work request back to us.
  if (rdma_disconnect(c_.id_.get()) != 0) disconnectDone_ = true;  // EINVAL: the peer went first
  maybeFinish();
}

void ConnectionTeardown::maybeFinish() noexcept {
  if (!closing() || !disconnectDone_) return;  // the common case, on every completion
  const QueuePair* queuePair = c_.queuePair_.get();
  const SendQueue* queue = queuePair ? queuePair->sendQueue() : nullptr;
  const size_t sendsInFlight = queue ? queue->inFlight() : 0;
  const uint32_t receivesPosted = queuePair ? queuePair->postedReceives() : 0;
  if (flushedAll_ || (receivesPosted == 0 && sendsInFlight == 0)) scheduleFinish();
}

void ConnectionTeardown::scheduleFinish() noexcept {
  if (c_.life_ >= Life::FinishScheduled) return;
  c_.setLife(Life::FinishScheduled);
  // Never inside a callback of this connection (the handler may still be on the stack), and at
  // most a few connections per turn (Reactor::deferTeardown).
  coreOf(c_.reactor_).deferTeardown([this] { finish(Ending::Told); });
}

void ConnectionTeardown::finish(Ending ending) noexcept {
  const bool told = ending == Ending::Told;
  if (finished()) {  // told already (its owner frees it on a later turn); then the Reactor went
    if (!told) {
      c_.setLife(Life::Orphaned);
      c_.onOrphaned();  // may free the connection
    }
    return;
  }
  // Orphaned, nothing of the Reactor's is touched: its timers and loop are gone.
  if (told) disconnectTimer_.cancel();
  if (c_.queuePair_) c_.queuePair_->destroyQp();  // the device touches no memory of ours from here on
  if (told) {
    // What the flush did not hand back (disconnectTimeout ran out first, or iWARP took it after its
    // flush: postedWorkNeverReturns), then what never went out.
    if (SendQueue* queue = c_.queuePair_ ? c_.queuePair_->sendQueue() : nullptr)
      for (const SendOp& op : queue->takeInFlight()) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
    for (const SendOp& op : dropped_) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
  }
  releaseResources();
  if (!told) {
    c_.setLife(Life::Orphaned);  // silent: the application hears nothing (see Reactor)
    c_.onOrphaned();            // may free the connection
    return;
  }
  c_.setLife(Life::Finished);
  c_.handler_->onClosed(c_.facade());
  c_.onFinished();
}

void ConnectionTeardown::releaseResources() noexcept {
  // The QP first (the device touches no memory of ours from then on), then what used it: the
  // regions lent to the peer, the frame slots' users, the CQ entries and buffers, the id.
  if (c_.queuePair_) c_.queuePair_->destroyQp();
  c_.regionExchange_.reset();
  c_.lendingPool_.reset();  // after what it lent
  c_.framedSender_.reset();
  c_.queuePair_.reset();
  dropped_.clear();
  c_.id_.reset();
}

void ConnectionTeardown::onReactorGone() noexcept { finish(Ending::Orphaned); }

}  // namespace evrdma::detail
