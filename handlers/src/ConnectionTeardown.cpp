// Connection, teardown: failures (reported once, then the close), the device going away, the
// Reactor going first, and the close in two steps: rdma_disconnect, then, once DISCONNECTED and
// every flushed work request are back (or disconnectTimeout ran out), every resource released and
// onClosed as the last callback, on a later turn. Every accepted operation gets its onOpDone first.
#include "evrdma/Connection.h"

#include <cstring>
#include <string>

#include "Device.h"
#include "Logging.h"
#include "FramedSender.h"
#include "HeldMessages.h"
#include "LendingPool.h"
#include "QueuePair.h"
#include "ReactorCore.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "evrdma/Reactor.h"

namespace evrdma {

void Connection::onDeviceGone() noexcept {
  // Every connection on the device hears it (this one too, if its QP exists): onDeviceRemoved.
  if (queuePair_ && queuePair_->device() != nullptr) queuePair_->device()->markRemoved();
  onDeviceRemoved();
}

void Connection::onDeviceRemoved() noexcept {
  // Nothing posted will come back, and the removal waits for our resources: release them now
  // rather than after disconnectTimeout.
  if (deviceGone_ || finished()) return;
  deviceGone_ = true;
  // Also when the connection was already closing because the peer went (the removal may break
  // it from the other end first): the application learns why. Not after its own close().
  if (closing() && !failed_ && !closeRequested_) {
    failed_ = true;
    handler_->onError(*this, -ENODEV, "device removal: the RDMA device went away");
  }
  fail(-ENODEV, "device removal: the RDMA device went away");
  if (closing()) {
    disconnectDone_ = true;
    scheduleFinish();
  }
}

void Connection::failLater(int err, const char* op) noexcept {
  if (closing()) return;
  failed_ = true;
  if (error_ == 0) error_ = err;
  logFailure(err, op);
  // The caller is inside one of our calls (postSend, endBatch...): it gets the error as the
  // return value, and onError comes after it returned (deferred before finish(), so it precedes
  // onClosed).
  laterErrorText_ = op;
  reactor_.defer([this, err] { handler_->onError(*this, err, laterErrorText_.c_str()); });
  beginTeardown();
}

void Connection::fail(int err, const char* op) noexcept {
  if (closing()) return;
  failed_ = true;
  if (error_ == 0) error_ = err;
  logFailure(err, op);
  handler_->onError(*this, err, op);
  beginTeardown();
}

void Connection::logFailure(int err, const char* op) const noexcept {
  EVRDMA_LOG(LogLevel::Info, "%s %s failed: %s: %s", isClient_ ? "client of" : "agent for", peerAddress_.c_str(), op,
             strerror(-err));
}

void Connection::close() noexcept {
  if (!closing()) closeRequested_ = true;
  beginTeardown();
}

void Connection::reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept {
  // Copied sends used evrdma's own buffers, and internal frames are evrdma's: nothing to give back.
  if (orphaned() || op.internal || op.copySlot >= 0) return;
  handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});
}

void Connection::beginTeardown() noexcept {
  if (closing()) return;
  teardown_ = Teardown::Disconnecting;
  livenessTimer_.cancel();
  unexplainedFlushTimer_.cancel();
  deliverHeldTimer_.cancel();
  for (; !heldMessages_->empty(); heldMessages_->pop_front()) keepReceive(heldMessages_->front().slot);
  // Never posted: nothing to wait for. Reported as flushed just before onClosed, in the order
  // issued (the send queue's backlog is older than what waits for credits).
  if (SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr)
    for (const SendOp& op : queue->takeBacklog()) {
      ++stats_.requestsDropped;
      dropped_.push_back(op);
    }
  if (framedSender_)
    for (const SendOp& op : framedSender_->stop()) {
      ++stats_.requestsDropped;
      dropped_.push_back(op);
    }
  // A receive may have come before the ESTABLISHED event (and failed the connection): the peer
  // is connected, and only a disconnect tells it.
  const bool wasConnected = state_ == ConnectionState::Established || peerReached_;
  setState(ConnectionState::Disconnecting);
  if (!wasConnected || !queuePair_ || !queuePair_->hasQp() || deviceGone_) {
    // Nothing established: destroying the id cancels a resolution or a pending connect.
    disconnectDone_ = true;
    scheduleFinish();
    return;
  }
  disconnectTimer_.startOnce(options_.disconnectTimeout);  // whatever happens, the end comes
  if (!isClient_ && !cmEstablished_) {
    // An agent whose client was heard before the CM said ESTABLISHED (notePeerReached asked the
    // CM to count it established): disconnecting now would race the CM's own work for that, and
    // Linux's CM then leaves its REP outstanding, retried for about a minute, while rdma_destroy_id
    // blocks the loop waiting for it (seen: a server that answered nothing for a minute). The
    // event comes within moments; the disconnect goes then (or the timer ends it all).
    teardown_ = Teardown::AwaitingEstablished;
    return;
  }
  disconnect();
}

void Connection::disconnect() noexcept {
  // Moves the QP to the error state, which flushes every posted work request back to us.
  if (rdma_disconnect(id_.get()) != 0) disconnectDone_ = true;  // EINVAL: the peer went first
  maybeFinish();
}

void Connection::maybeFinish() noexcept {
  if (!closing() || !disconnectDone_) return;  // the common case, on every completion
  const SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr;
  const size_t sendsInFlight = queue ? queue->inFlight() : 0;
  if (postedRecvs() == 0 && sendsInFlight == 0) scheduleFinish();
}

void Connection::scheduleFinish() noexcept {
  if (teardown_ >= Teardown::FinishScheduled) return;
  teardown_ = Teardown::FinishScheduled;
  // Never inside a callback of this connection (the handler may still be on the stack), and at
  // most a few connections per turn (Reactor::deferTeardown).
  reactor_.core().deferTeardown([this] { finish(); });
}

void Connection::finish() noexcept {
  disconnectTimer_.cancel();
  if (queuePair_) queuePair_->destroyQp();  // the device touches no memory of ours from here on
  // What the flush did not hand back (disconnectTimeout ran out first), then what never went out.
  if (SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr)
    for (const SendOp& op : queue->takeInFlight()) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
  for (const SendOp& op : dropped_) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
  dropped_.clear();
  releaseResources();
  teardown_ = Teardown::Finished;
  setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  handler_->onClosed(*this);
  onFinished();
}

void Connection::releaseResources() noexcept {
  // The QP first (the device touches no memory of ours from then on), then what used it: the
  // regions lent to the peer, the frame slots' users, the CQ entries and buffers, the id.
  if (queuePair_) queuePair_->destroyQp();
  regionExchange_.reset();
  lendingPool_.reset();  // after what it lent
  framedSender_.reset();
  queuePair_.reset();
  dropped_.clear();
  id_.reset();
}

void Connection::onReactorGone() noexcept {
  // Silent: the application hears nothing (see Reactor), and nothing here touches the Reactor.
  const bool wasFinished = finished();
  teardown_ = Teardown::Orphaned;
  if (!wasFinished) {
    releaseResources();
    setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  }
  onOrphaned();  // may free this object
}

}  // namespace evrdma
