// ConnectionCore: construction, the wiring of the verbs parts (QueuePair, FramedSender, LendingPool,
// RegionExchange, each in its own file), the CM state machine (one switch over every event in
// every state), the connection coming up, the liveness checks, and each event routed to its part.
#include "ConnectionCore.h"

#include <algorithm>
#include <cerrno>
#include <string>

#include "CmEvent.h"
#include "Device.h"
#include "Frame.h"
#include "Logging.h"
#include "FramedSender.h"
#include "Liveness.h"
#include "LendingPool.h"
#include "LingeringHandler.h"
#include "QueuePair.h"
#include "ReactorCore.h"
#include "ReactorMember.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "WorkRequestId.h"
#include "evrdma/Address.h"
#include "evrdma/Reactor.h"

namespace evrdma {

ConnectionCore::ConnectionCore(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler,
                               const ConnectionOptions& options, bool isClient)
    : reactor_(reactor),
      handler_(handler ? std::move(handler) : std::make_unique<ConnectionHandler>()),
      options_(options),
      isClient_(isClient),
      teardown(*this),
      sender(*this),
      receiver(*this),
      livenessTick_([this](std::chrono::steady_clock::time_point now) { onLivenessTick(now); }) {
  coreOf(reactor).join(this);
  ++coreOf(reactor).connectionCounts()[state()];
}

ConnectionCore::~ConnectionCore() {
  if (!orphaned()) {
    coreOf(reactor_).leave(this);
    --coreOf(reactor_).connectionCounts()[state()];
  }
  if (tally_.groupCounts != nullptr) --(*tally_.groupCounts)[state()];
  teardown.releaseResources();  // normally the finish did already
}

void ConnectionCore::setLife(detail::Life next) noexcept {
  const ConnectionState before = state();
  life_ = next;
  const ConnectionState after = state();
  if (after == before) return;
  if (!orphaned()) detail::moveCount(coreOf(reactor_).connectionCounts(), before, after);  // else gone with the Reactor
  if (tally_.groupCounts != nullptr) detail::moveCount(*tally_.groupCounts, before, after);
}

void ConnectionCore::joinGroup(ConnectionCounts& counts, ConnectionStats& stats) noexcept {
  tally_.groupCounts = &counts;
  tally_.groupStats = &stats;
  ++counts[state()];
  stats += tally_.own;
}

void ConnectionCore::adoptId(CmId id) noexcept {
  id_ = std::move(id);
  immediateData_ = -1;
  id_->context = static_cast<CmEventHandler*>(this);
  if (!isClient_) peerAddress_ = formatAddress(rdma_get_peer_addr(id_.get()));
}

int ConnectionCore::setUpVerbs(const char*& op, detail::PreparedMappings* prepared) noexcept {
  if (int rc = checkOptions(options_, op); rc != 0) return rc;
  queuePair_ = std::make_unique<detail::QueuePair>();
  const int rc = queuePair_->setUp(reactor_, id_.get(), options_, *this, op, prepared);
  if (const Device* device = queuePair_->device()) {
    completionStats_ = &device->stats();
    device_ = device->context();
  }
  if (rc != 0) return rc;
  if (!options_.framed) return 0;
  flowControl_ = std::make_unique<CreditLedger>(options_.recvDepth);
  flowControl_->setYields(isClient_);  // when both sides wait for credits, the client answers first
  framedSender_ = std::make_unique<detail::FramedSender>(*flowControl_, queuePair_->frameSlots(),
                                                         queuePair_->frameSlotCount(), queuePair_->frameSlotLkey(),
                                                         tally_, *queuePair_->sendQueue());
  if (options_.creditTimeout.count() > 0) framedSender_->onWaitBegins([this] { onCreditWaitBegan(); });
  ibv_pd* pd = queuePair_->protectionDomain();
  detail::MemoryAccount& account = queuePair_->device()->memoryAccount();
  if (options_.lendingPoolBytes > 0) {
    // Registered now, at setup: a peer's requestRegion is then served without a registration.
    lendingPool_ = std::make_unique<detail::LendingPool>();
    if (int failed = lendingPool_->init(pd, account, options_.lendingPoolBytes); failed != 0) {
      lendingPool_.reset();
      op = "lending pool registration (ConnectionOptions::lendingPoolBytes)";
      if (failed == -ENOBUFS) {  // past the Reactor's budget: say what is in use and what it needs
        const uint64_t pool = detail::BufferMemory::pinnedBytes(options_.lendingPoolBytes);
        errorText_ = "lending pool (ConnectionOptions::lendingPoolBytes): " + account.refusal(pool, pool);
        op = errorText_.c_str();
      }
      return failed;
    }
  }
  regionExchange_ = std::make_unique<detail::RegionExchange>(
      options_.maxLentBytes, options_.maxLentRegions, options_.maxPeerRegions,
      [this](std::vector<uint8_t> frame) {
        const int sent = framedSender_->sendControl(std::move(frame));
        if (sent == -ENOBUFS) {
          errorText_ = "the peer keeps asking for regions without returning the credits to answer it (" +
                       std::to_string(framedSender_->answersWaiting()) + " answers wait)";
          failLater(sent, errorText_.c_str());
          return sent;
        }
        return sender.ownPosted(sent);
      },
      [this, pd, account = &account](uint64_t bytes, int access, RemoteRegion& remote, MemoryCharge& charge,
                                     int& error) -> detail::RegionExchange::LentRegion {
        if (detail::LendingPool* pool = lendingPool_.get()) {
          auto piece = std::make_unique<MemoryRegion>(pool->take(bytes, access));
          if (!*piece) {
            error = -ENOMEM;  // the pool has no free range that large
            return nullptr;
          }
          piece->remote(remote);
          return detail::RegionExchange::LentRegion(piece.release(), [pool](MemoryRegion* given) {
            pool->give(*given);
            delete given;
          });
        }
        // Lent memory counts against the Reactor's budget, across all its connections.
        if (account->charge(detail::BufferMemory::pinnedBytes(bytes), charge) != 0) {
          error = -ENOMEM;
          return nullptr;
        }
        auto region = std::make_unique<MemoryRegion>(MemoryRegion::allocate(pd, bytes, access, error));
        if (!*region) return nullptr;
        region->remote(remote);
        return detail::RegionExchange::LentRegion(region.release(), std::default_delete<MemoryRegion>());
      },
      *this, tally_);
  return 0;
}

rdma_conn_param ConnectionCore::connParam(const std::vector<uint8_t>& privateData) const noexcept {
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

void ConnectionCore::onCmEvent(const CmEvent& event) noexcept {
  if (teardown.finished()) return;
  if (event.type == RDMA_CM_EVENT_ESTABLISHED) cmEstablished_ = true;
  if (closing()) {
    teardown.onCmEvent(event);
    return;
  }
  const bool connecting = life_ == detail::Life::Connecting || life_ == detail::Life::Accepting;
  switch (event.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (life_ != detail::Life::ResolvingAddr) break;
      onAddressResolved();
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (life_ != detail::Life::ResolvingAddr) break;
      fail(event.status < 0 ? event.status : -EHOSTUNREACH, "rdma_resolve_addr: no route to that address");
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      if (life_ != detail::Life::ResolvingRoute) break;
      onRouteResolved();
      return;
    case RDMA_CM_EVENT_ROUTE_ERROR:
      if (life_ != detail::Life::ResolvingRoute) break;
      fail(event.status < 0 ? event.status : -EHOSTUNREACH, "rdma_resolve_route");
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (connecting) {
        transportUp(false);
        return;
      }
      if (life_ == detail::Life::Established) return;  // a receive announced it already
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
      if (life_ == detail::Life::Established) {
        onDisconnectedEvent();
        return;
      }
      if (connecting) {
        teardown.notePeerGone();  // nothing to wait for before the answer to its DREQ
        fail(-ECONNRESET, "connection reset before it was established");
        return;
      }
      break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return;  // informational: nothing to do
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      teardown.onDeviceGone();
      return;
    default:
      break;
  }
  errorText_ = std::string("unexpected CM event ") + event.name() + " in state " + toString(state());
  fail(-EPROTO, errorText_.c_str());
}

void ConnectionCore::onDisconnectedEvent() noexcept {
  // The CM channel may be read before the completion channel: what the peer sent before it left
  // is in the CQ already, and reaches onRecv before onDisconnected, once the dispatcher's own pass
  // has handed it out (on a later turn; not from inside this CM event).
  if (queuePair_ && queuePair_->attachment()) {
    queuePair_->attachment()->whenDrained([this] { afterPeerDisconnected(); });
    return;
  }
  afterPeerDisconnected();
}

void ConnectionCore::afterPeerDisconnected() noexcept {
  // What it sent before it left and we held (paused) comes first, then the news that it left;
  // unless the application closed (or it failed) meanwhile.
  if (!closing() && life_ == detail::Life::Established) receiver.handOutHeldAsPeerLeft();
  if (!closing()) handler_->onDisconnected(facade());
  teardown.peerDisconnected();  // the peer's side is gone; ours follows
}

void ConnectionCore::transportUp(bool peerSpoke) noexcept {
  if (!options_.framed) {
    markEstablished();
    return;
  }
  // Framed: our first frame says how large a message we take (and returns our receives as
  // credits); the connection is established for the application once the peer's has arrived.
  // The client speaks first, the agent answers: an iWARP responder must not send before the
  // initiator has (siw terminates connections that race it).
  if (helloSent_ || !framedSender_) return;
  if (!isClient_ && !peerSpoke) {
    onAwaitingHello();
    return;
  }
  helloSent_ = true;
  sender.ownPosted(framedSender_->sendHello(options_.maxMessageSize));
}

void ConnectionCore::notePeerReached() noexcept {
  // An agent's QP can receive before the client's RTU reaches the CM (InfiniBand, RoCE): the
  // connection is up for us, and a close waits for the CM's ESTABLISHED before it disconnects
  // (ConnectionTeardown::begin). The CM is not told (rdma_notify COMM_EST): Linux's CM then counts
  // it established at once but cancels its REP only in work it queues, which does nothing if the
  // client's DREQ is handled first; the REP stays outstanding, retried for about a minute, and
  // rdma_destroy_id waits for it with the loop blocked (1 in ~3 000 connect / write / free cycles
  // of a stream). Untold, the CM cancels the REP on the client's RTU, or on its DREQ if that comes first.
  peerReached_ = true;
}

void ConnectionCore::markEstablished() noexcept {
  // Once closing, the connection never opens again (a hello that arrives after close() opens
  // nothing: its life is past Established).
  if (life_ == detail::Life::Established || closing()) return;
  setLife(detail::Life::Established);
  establishedAt_ = std::chrono::steady_clock::now();
  startLivenessChecks();
  onEstablishedByRole();  // e.g. the client's connect timer stops, whoever announced it
  if (framedSender_) sender.ownPosted(framedSender_->maybeSendCreditFrame());  // tell the peer about our receives first
  handler_->onEstablished(facade());
}

uint64_t ConnectionCore::activity() const noexcept {
  return tally_.own.messagesSent + tally_.own.messagesReceived + tally_.own.opsCompleted;
}

void ConnectionCore::startLivenessChecks() noexcept {
  detail::Liveness liveness(detail::Liveness::Settings{framedSender_ != nullptr, options_.keepaliveInterval,
                                                        options_.keepaliveTimeout, options_.idleTimeout});
  const std::chrono::milliseconds tick = liveness.tickPeriod();
  if (tick.count() == 0) return;  // no keepalive, no idle timeout: nothing allocated
  liveness.start(establishedAt_, receiver.receivesSeen(), activity());
  liveness_ = std::make_unique<detail::Liveness>(liveness);
  livenessTick_.start(coreOf(reactor_).alignedTicks(), tick, liveness.alignment(), establishedAt_);
}

void ConnectionCore::onLivenessTick(std::chrono::steady_clock::time_point now) noexcept {
  if (!sendable()) {
    livenessTick_.cancel();
    return;
  }
  std::chrono::milliseconds silence{0};
  switch (liveness_->tick(now, receiver.receivesSeen(), activity(), silence)) {
    case detail::Liveness::Verdict::Fine:
      return;
    case detail::Liveness::Verdict::Idle:
      livenessTick_.cancel();
      errorText_ = "idle timeout: no message either way for " + std::to_string(liveness_->idleTimeout().count()) + " ms";
      fail(-ETIMEDOUT, errorText_.c_str());
      return;
    case detail::Liveness::Verdict::PeerSilent:
      livenessTick_.cancel();
      errorText_ = "keepalive: the peer has sent nothing, not even an answer to a probe, for " +
                   std::to_string(silence.count()) + " ms (keepaliveTimeout " +
                   std::to_string(liveness_->keepaliveTimeout().count()) + " ms)";
      EVRDMA_LOG(LogLevel::Warn, "%s %s: %s", isClient_ ? "client of" : "agent for", peerAddress_.c_str(),
                 errorText_.c_str());
      fail(-ETIMEDOUT, errorText_.c_str());
      return;
    case detail::Liveness::Verdict::Probe:
      tally_.add(&ConnectionStats::keepaliveProbesSent);
      if (int rc = framedSender_->sendKeepaliveProbe(); rc != 0) fail(rc, "ibv_post_send (keepalive probe)");
      return;
  }
}

void ConnectionCore::onCreditWaitBegan() noexcept {
  if (!creditTimer_) creditTimer_ = std::make_unique<Timer>(reactor_, [this] { onCreditTick(); });
  if (creditTimer_->active()) return;
  creditsSpentMark_ = framedSender_->creditsSpent();
  quietCreditTicks_ = 0;
  if (creditTimer_->startPeriodic(std::max(options_.creditTimeout / 4, std::chrono::milliseconds(1))) != 0)
    creditTimer_.reset();  // no timer: the wait is not bounded (only a failed event_add gets here)
}

void ConnectionCore::onCreditTick() noexcept {
  if (!sendable() || !framedSender_ || !framedSender_->waitingForCredits()) {
    creditTimer_->cancel();  // the next wait starts it again
    return;
  }
  if (framedSender_->creditsSpent() != creditsSpentMark_) {
    creditsSpentMark_ = framedSender_->creditsSpent();
    quietCreditTicks_ = 0;
    return;
  }
  if (++quietCreditTicks_ < 4) return;
  creditTimer_->cancel();
  errorText_ = "credit timeout: the peer took none of our messages for " +
               std::to_string(options_.creditTimeout.count()) + " ms while " +
               std::to_string(framedSender_->waiting()) + " waited for its credits (creditTimeout)";
  EVRDMA_LOG(LogLevel::Warn, "%s %s: %s", isClient_ ? "client of" : "agent for", peerAddress_.c_str(),
             errorText_.c_str());
  fail(-ETIMEDOUT, errorText_.c_str());
}

// ---- Each event to its part.

void ConnectionCore::onCompletion(const ibv_wc& wc) noexcept {
  if (detail::wrid::isSend(wc.wr_id)) {
    sender.onCompletion(wc);
    return;
  }
  // A receive: counted as consumed first (what anybody hears of it, onEstablished included, sees
  // one receive fewer posted), then what it says of the transport, then the receiver takes it,
  // then what that sets off on the send side. Downward only.
  queuePair_->onReceiveCompleted();
  if (!peerReached_ || life_ != detail::Life::Established) noteTransport(wc);
  if (receiver.onCompletion(wc)) afterReceiving();
}

void ConnectionCore::noteTransport(const ibv_wc& wc) noexcept {
  // A flush is our QP's error, not the peer.
  if (!peerReached_ && wc.status != IBV_WC_WR_FLUSH_ERR) notePeerReached();
  // The peer may send as soon as it is established, before our ESTABLISHED event arrives.
  if (wc.status == IBV_WC_SUCCESS && (life_ == detail::Life::Accepting || life_ == detail::Life::Connecting))
    transportUp(true);
}

void ConnectionCore::afterReceiving() noexcept {
  if (!closing()) {
    if (framedSender_) sender.ownPosted(framedSender_->pump());
    sender.notifyWritableIfDrained();
  }
  teardown.maybeFinish();
}

// What the callbacks of one poll's completions send goes out as one post at its end; but after a
// poll that found one message (a ping-pong's, with the completion of the previous answer's send
// beside it), the first request goes out at once: the peer waits for it, and the poll's
// bookkeeping (the receive re-posted) can come after. Not on an unframed iWARP connection: there
// a peer that answers at once could find that receive not yet posted again, and iWARP has no RNR
// retry (the connection ends); framed, credits keep the peer from it.
void ConnectionCore::onPollBegin(int receives) noexcept {
  SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr;
  pollBatch_ = queue != nullptr;
  if (pollBatch_) queue->beginBatch(receives == 1 && (options_.framed || supportsImmediateData()));
}

void ConnectionCore::onPollEnd() noexcept {
  if (!pollBatch_) return;
  pollBatch_ = false;
  (void)sender.endBatch();  // a failed post fails the connection
}

void ConnectionCore::onPoll(const ibv_wc* wcs, int n, int receives) noexcept {
  onPollBegin(receives);
  for (int i = 0; i < n; ++i) onCompletion(wcs[i]);
  onPollEnd();
}

void ConnectionCore::beforeLinger() noexcept {
  if (dynamic_cast<detail::LingeringHandler*>(handler_.get()) != nullptr || silenced_) return;
  silenced_ = std::move(handler_);
  handler_ = std::make_unique<ConnectionHandler>();
}

bool ConnectionCore::connectionState(ConnectionState& state) const noexcept {
  state = this->state();
  return true;
}

bool ConnectionCore::supportsImmediateData() const noexcept {
  // iWARP (RFC 5040) has no immediate data; InfiniBand and RoCE do. Asked per message (a send with
  // immediate, each poll's batch): the answer is kept once the device is known.
  if (immediateData_ < 0) {
    if (!id_ || !id_->verbs) return false;
    immediateData_ = isIwarp(id_->verbs) ? 0 : 1;
  }
  return immediateData_ == 1;
}

void ConnectionCore::onAsyncError(ibv_event_type type) noexcept {
  errorText_ = std::string("device async event: ") + ibv_event_type_str(type);
  // iWARP reports no completion for a message its receive buffer cannot hold: the QP goes fatal.
  if (type == IBV_EVENT_QP_FATAL && !supportsImmediateData())
    errorText_ += " (on iWARP: a message longer than this side's maxMessageSize (" +
                  std::to_string(options_.maxMessageSize) +
                  " B), or one that found no receive posted; both sides must use the same maxMessageSize)";
  fail(-EIO, errorText_.c_str());
}

void ConnectionCore::onCompletionQueueError(int err, const char* op) noexcept {
  errorText_ = std::string(op) + " failed on the connection's completion queue";
  fail(err, errorText_.c_str());
}

void ConnectionCore::onGranted(uint64_t tag, const RemoteRegion& region) noexcept {
  handler_->onRegionGranted(facade(), tag, region);
}
void ConnectionCore::onRefused(uint64_t tag, int err) noexcept { handler_->onRegionRefused(facade(), tag, err); }
void ConnectionCore::onReceived(const RemoteRegion& region, uint64_t tag) noexcept {
  handler_->onRegionReceived(facade(), region, tag);
}
void ConnectionCore::onLent(const MemoryRegion& region) noexcept { handler_->onRegionLent(facade(), region); }
void ConnectionCore::onReleased(const MemoryRegion& region) noexcept { handler_->onRegionReleased(facade(), region); }

}  // namespace evrdma
