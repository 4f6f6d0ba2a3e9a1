// Connection: construction, the CM state machine (one switch over every event in every state),
// failures and the device going away, and the teardown. Sending is in ConnectionSending.cpp, the
// completion routing in ConnectionCompletions.cpp; the parts (QueuePair, FramedSender,
// RegionExchange) each in their own file.
#include "evrdma/Connection.h"

#include <cerrno>
#include <string>

#include "CmEvent.h"
#include "CompletionDispatcher.h"
#include "FramedSender.h"
#include "QueuePair.h"
#include "ReactorMember.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "evrdma/Address.h"
#include "evrdma/Reactor.h"

namespace evrdma {

class Connection::Sink final : public CmEventHandler,
                               public CompletionHandler,
                               public detail::ReactorMember,
                               public detail::RegionExchange::Events {
 public:
  explicit Sink(Connection& connection) : c_(connection) {}
  void onCmEvent(const CmEvent& event) noexcept override { c_.onCmEvent(event); }
  void onCompletion(const ibv_wc& wc) noexcept override { c_.onCompletion(wc); }
  void onAsyncError(ibv_event_type type) noexcept override { c_.onAsyncError(type); }
  void onCompletionQueueError(int err, const char* op) noexcept override { c_.onCompletionQueueError(err, op); }
  void onDeviceRemoved() noexcept override { c_.onDeviceRemoved(); }
  void onReactorGone() noexcept override { c_.onReactorGone(); }  // may free the connection
  void onGranted(uint64_t tag, const RemoteRegion& region) noexcept override {
    c_.handler_->onRegionGranted(c_, tag, region);
  }
  void onRefused(uint64_t tag, int err) noexcept override { c_.handler_->onRegionRefused(c_, tag, err); }
  void onReceived(const RemoteRegion& region, uint64_t tag) noexcept override {
    c_.handler_->onRegionReceived(c_, region, tag);
  }
  void onLent(const MemoryRegion& region) noexcept override { c_.handler_->onRegionLent(c_, region); }

 private:
  Connection& c_;
};

const char* toString(ConnectionState state) noexcept {
  switch (state) {
    case ConnectionState::Idle: return "Idle";
    case ConnectionState::ResolvingAddr: return "ResolvingAddr";
    case ConnectionState::ResolvingRoute: return "ResolvingRoute";
    case ConnectionState::Connecting: return "Connecting";
    case ConnectionState::Accepting: return "Accepting";
    case ConnectionState::Established: return "Established";
    case ConnectionState::Disconnecting: return "Disconnecting";
    case ConnectionState::Closed: return "Closed";
    case ConnectionState::Failed: return "Failed";
  }
  return "?";
}

Connection::Connection(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ConnectionOptions& options,
                       bool isClient)
    : reactor_(reactor),
      handler_(handler ? std::move(handler) : std::make_unique<ConnectionHandler>()),
      options_(options),
      isClient_(isClient),
      sink_(std::make_unique<Sink>(*this)),
      disconnectTimer_(reactor, [this] {
        disconnectDone_ = true;  // waited long enough for the peer and the flushes
        scheduleFinish();
      }) {
  reactor.join(sink_.get());
}

Connection::~Connection() {
  if (!orphaned_) reactor_.leave(sink_.get());
  releaseResources();  // normally finish() did already
}

void Connection::onReactorGone() noexcept {
  // Silent: the application hears nothing (see Reactor), and nothing here touches the Reactor.
  orphaned_ = true;
  if (!finished_) {
    teardownStarted_ = true;
    finished_ = true;
    releaseResources();
    setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  }
  onOrphaned();  // may free this object
}

void Connection::adoptId(CmId id) noexcept {
  id_ = std::move(id);
  id_->context = static_cast<CmEventHandler*>(sink_.get());
  if (!isClient_) peerAddress_ = formatAddress(rdma_get_peer_addr(id_.get()));
}

int Connection::setUpVerbs(const char*& op) noexcept {
  if (int rc = checkOptions(options_, op); rc != 0) return rc;
  queuePair_ = std::make_unique<detail::QueuePair>();
  const int rc = queuePair_->setUp(reactor_, id_.get(), options_, *sink_, op);
  if (const CompletionDispatcher* completions = queuePair_->completions()) {
    completionStats_ = &completions->stats();
    device_ = completions->context();
  }
  if (rc != 0) return rc;
  if (!options_.framed) return 0;
  framedSender_ = std::make_unique<detail::FramedSender>(
      options_.recvDepth, queuePair_->frameSlots(), queuePair_->frameSlotCount(), queuePair_->frameSlotLkey(), stats_,
      [this](const SendOp& request) { return submit(request); });
  ibv_pd* pd = queuePair_->protectionDomain();
  regionExchange_ = std::make_unique<detail::RegionExchange>(
      options_.maxLentBytes, options_.maxPeerRegions,
      [this](std::vector<uint8_t> frame) { return framedSender_->sendControl(std::move(frame)); },
      [pd](uint64_t bytes, int access, RemoteRegion& remote, int& error) {
        auto region = std::make_unique<MemoryRegion>(MemoryRegion::allocate(pd, bytes, access, error));
        if (!*region) return std::unique_ptr<MemoryRegion>();
        region->remote(remote);
        return region;
      },
      *sink_);
  return 0;
}

rdma_conn_param Connection::connParam(const std::vector<uint8_t>& privateData) const noexcept {
  rdma_conn_param param{};
  param.private_data = privateData.empty() ? nullptr : privateData.data();
  param.private_data_len = static_cast<uint8_t>(privateData.size());
  param.responder_resources = options_.responderResources;
  param.initiator_depth = options_.initiatorDepth;
  param.retry_count = options_.retryCount;  // used by the active side only
  param.rnr_retry_count = options_.rnrRetryCount;
  return param;
}

// ---- The CM state machine ----

void Connection::onCmEvent(const CmEvent& event) noexcept {
  if (finished_) return;
  if (teardownStarted_) {
    // Closing: only the end of the disconnect matters now, or the device going away under it.
    if (event.type == RDMA_CM_EVENT_DISCONNECTED) {
      disconnectDone_ = true;
      maybeFinish();
    } else if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      onDeviceGone();
    }
    return;
  }
  const bool connecting = state_ == ConnectionState::Connecting || state_ == ConnectionState::Accepting;
  switch (event.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (state_ != ConnectionState::ResolvingAddr) break;
      onAddressResolved();
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (state_ != ConnectionState::ResolvingAddr) break;
      fail(event.status < 0 ? event.status : -EHOSTUNREACH, "rdma_resolve_addr: no route to that address");
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      if (state_ != ConnectionState::ResolvingRoute) break;
      onRouteResolved();
      return;
    case RDMA_CM_EVENT_ROUTE_ERROR:
      if (state_ != ConnectionState::ResolvingRoute) break;
      fail(event.status < 0 ? event.status : -EHOSTUNREACH, "rdma_resolve_route");
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (connecting) {
        transportUp(false);
        return;
      }
      if (state_ == ConnectionState::Established) return;  // a receive announced it already
      break;
    case RDMA_CM_EVENT_REJECTED:
      if (!connecting) break;
      onConnectRejected(event);
      return;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      if (!connecting) break;
      onConnectFailed(event);
      return;
    case RDMA_CM_EVENT_DISCONNECTED:
      if (state_ == ConnectionState::Established) {
        onDisconnectedEvent();
        return;
      }
      if (connecting) {
        fail(-ECONNRESET, "connection reset before it was established");
        return;
      }
      break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return;  // informational: nothing to do
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      onDeviceGone();
      return;
    default:
      break;
  }
  errorText_ = std::string("unexpected CM event ") + event.name() + " in state " + toString(state_);
  fail(-EPROTO, errorText_.c_str());
}

void Connection::onDisconnectedEvent() noexcept {
  // The CM channel may be read before the completion channel: what the peer sent before it left
  // is in the CQ already, and reaches onRecv before onDisconnected.
  if (queuePair_ && queuePair_->attachment()) queuePair_->attachment()->deliverPending();
  if (teardownStarted_ || finished_) {  // the application closed (or it failed) meanwhile
    disconnectDone_ = true;
    maybeFinish();
    return;
  }
  handler_->onDisconnected(*this);
  disconnectDone_ = true;  // the peer's side is gone; ours follows in beginTeardown
  beginTeardown();
}

void Connection::transportUp(bool peerSpoke) noexcept {
  if (!options_.framed) {
    markEstablished();
    return;
  }
  // Framed: our first frame says how large a message we take (and returns our receives as
  // credits); the connection is established for the application once the peer's has arrived.
  // The client speaks first, the agent answers: an iWARP responder must not send before the
  // initiator has (siw terminates connections that race it).
  if (helloSent_ || !framedSender_ || (!isClient_ && !peerSpoke)) return;
  helloSent_ = true;
  framedSender_->sendHello(options_.maxMessageSize);
}

void Connection::markEstablished() noexcept {
  if (state_ == ConnectionState::Established) return;
  setState(ConnectionState::Established);
  onEstablishedByRole();  // e.g. the client's connect timer stops, whoever announced it
  if (framedSender_) framedSender_->maybeSendCreditFrame();  // tell the peer about our receives first
  handler_->onEstablished(*this);
}

// ---- Failures and the device going away ----

void Connection::onAsyncError(ibv_event_type type) noexcept {
  errorText_ = std::string("device async event: ") + ibv_event_type_str(type);
  // iWARP reports no completion for a message its receive buffer cannot hold: the QP goes fatal.
  if (type == IBV_EVENT_QP_FATAL && !supportsImmediateData())
    errorText_ += " (on iWARP: a message longer than this side's maxMessageSize (" +
                  std::to_string(options_.maxMessageSize) +
                  " B), or one that found no receive posted; both sides must use the same maxMessageSize)";
  fail(-EIO, errorText_.c_str());
}

void Connection::onCompletionQueueError(int err, const char* op) noexcept {
  errorText_ = std::string(op) + " failed on the connection's completion queue";
  fail(err, errorText_.c_str());
}

void Connection::onDeviceGone() noexcept {
  // Every connection on the device hears it (this one too, if its QP exists): onDeviceRemoved.
  if (queuePair_ && queuePair_->completions() != nullptr) queuePair_->completions()->markDeviceRemoved();
  onDeviceRemoved();
}

void Connection::onDeviceRemoved() noexcept {
  // Nothing posted will come back, and the removal waits for our resources: release them now
  // rather than after disconnectTimeout.
  if (deviceGone_ || finished_) return;
  deviceGone_ = true;
  // Also when the connection was already closing because the peer went (the removal may break
  // it from the other end first): the application learns why. Not after its own close().
  if (teardownStarted_ && !failed_ && !closeRequested_) {
    failed_ = true;
    handler_->onError(*this, -ENODEV, "device removal: the RDMA device went away");
  }
  fail(-ENODEV, "device removal: the RDMA device went away");
  if (teardownStarted_) {
    disconnectDone_ = true;
    scheduleFinish();
  }
}

void Connection::failLater(int err, const char* op) noexcept {
  if (teardownStarted_ || finished_) return;
  failed_ = true;
  // The caller is inside one of our calls (postSend, endBatch...): it gets the error as the
  // return value, and onError comes after it returned (deferred before finish(), so it precedes
  // onClosed).
  laterErrorText_ = op;
  reactor_.defer([this, err] { handler_->onError(*this, err, laterErrorText_.c_str()); });
  beginTeardown();
}

void Connection::fail(int err, const char* op) noexcept {
  if (teardownStarted_ || finished_) return;
  failed_ = true;
  handler_->onError(*this, err, op);
  beginTeardown();
}

// ---- Teardown ----

void Connection::close() noexcept {
  if (!teardownStarted_) closeRequested_ = true;
  beginTeardown();
}

void Connection::reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept {
  // Copied sends used evrdma's own buffers, and internal frames are evrdma's: nothing to give back.
  if (orphaned_ || op.internal || op.copySlot >= 0) return;
  handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});
}

void Connection::beginTeardown() noexcept {
  if (teardownStarted_ || finished_) return;
  teardownStarted_ = true;
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
  const bool wasConnected = state_ == ConnectionState::Established;
  setState(ConnectionState::Disconnecting);
  if (!wasConnected || !queuePair_ || !queuePair_->hasQp() || deviceGone_) {
    // Nothing established: destroying the id cancels a resolution or a pending connect.
    disconnectDone_ = true;
    scheduleFinish();
    return;
  }
  // Moves the QP to the error state, which flushes every posted work request back to us.
  if (rdma_disconnect(id_.get()) != 0) disconnectDone_ = true;  // EINVAL: the peer went first
  disconnectTimer_.startOnce(options_.disconnectTimeout);
  maybeFinish();
}

void Connection::maybeFinish() noexcept {
  const SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr;
  const size_t sendsInFlight = queue ? queue->inFlight() : 0;
  if (teardownStarted_ && disconnectDone_ && postedRecvs() == 0 && sendsInFlight == 0) scheduleFinish();
}

void Connection::scheduleFinish() noexcept {
  if (finishScheduled_ || finished_) return;
  finishScheduled_ = true;
  // Never inside a callback of this connection: the handler may still be on the stack.
  reactor_.defer([this] { finish(); });
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
  finished_ = true;
  setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  handler_->onClosed(*this);
  onFinished();
}

void Connection::releaseResources() noexcept {
  // The QP first (the device touches no memory of ours from then on), then what used it: the
  // regions lent to the peer, the frame slots' users, the CQ entries and buffers, the id.
  if (queuePair_) queuePair_->destroyQp();
  regionExchange_.reset();
  framedSender_.reset();
  queuePair_.reset();
  dropped_.clear();
  id_.reset();
}

}  // namespace evrdma
