/// \file
/// Connection: what an Agent (server side) and a Client share: one RC connection, its cm_id, its
/// explicit state, the application's handler, and the teardown. The parts behind it, each in its own
/// file under handlers/src: QueuePair (verbs resources and receive posting), FramedSender (credits,
/// frame slots, the waiting line), RegionExchange (memory-region exchange), WorkRequestId (wr_id);
/// the class itself by concern in Connection.cpp (the CM state machine), ConnectionSending.cpp,
/// ConnectionCompletions.cpp and ConnectionTeardown.cpp.
///
/// The rule for every CM event in every state (one switch, in Connection::onCmEvent):
///   ADDR_RESOLVED      ResolvingAddr  -> the role: resolve the route    -> ResolvingRoute
///   ROUTE_RESOLVED     ResolvingRoute -> the role: set up verbs, rdma_connect -> Connecting
///   ADDR_ERROR         ResolvingAddr  -> onError(status, "rdma_resolve_addr")      -> Failed
///   ROUTE_ERROR        ResolvingRoute -> onError(status, "rdma_resolve_route")     -> Failed
///   ESTABLISHED        Connecting / Accepting -> onEstablished            -> Established
///                      Established    -> nothing (a receive may announce the connection first)
///   REJECTED           Connecting     -> the role: onRejected(reason), or onError(-ECONNREFUSED)
///                                        when nobody listens there       -> Closed / Failed
///                      Accepting      -> the role: onError(...)          -> Failed
///   UNREACHABLE,
///   CONNECT_ERROR      Connecting / Accepting -> the role: onError(...)  -> Failed
///   DISCONNECTED       Established    -> deliver the completions already in the CQ (a message
///                                        the peer sent before it left reaches onRecv first),
///                                        then onDisconnected, disconnect our side, drain -> Closed
///                      Disconnecting  -> the disconnect finished, drain  -> Closed
///                      Connecting / Accepting -> onError(-ECONNRESET)   -> Failed
///   TIMEWAIT_EXIT,
///   ADDR_CHANGE        any            -> nothing: informational, the connection is unaffected
///   DEVICE_REMOVAL     any            -> onError(-ENODEV, "device removal"), resources released at
///                                        once (no flush will come)      -> Failed
///   anything else      any            -> onError(-EPROTO, "unexpected CM event ...") -> Failed
/// Once close() was called (or teardown began), events and completions only drive the teardown:
/// the application hears nothing more but onOpDone for each operation still outstanding (with
/// status IBV_WC_WR_FLUSH_ERR when the teardown flushed it or it was never posted: every send(),
/// rdmaWrite(), rdmaRead()... that returned 0 gets exactly one onOpDone, so the memory it used
/// can always be given back), then onClosed.
///
/// Framed connections (ConnectionOptions::framed, both sides): every message carries a Frame
/// header. Each side's first frame is a hello with its maxMessageSize: onEstablished comes once the
/// peer's has arrived, and a send longer than the peer takes is refused (-EMSGSIZE) before posting.
/// Sends, sends with immediate, RDMA writes with immediate and the protocol's own frames each
/// spend one credit (one of the peer's posted receives, see CreditLedger); a message goes only
/// while it leaves three for the protocol's frames, else it waits, in order, and RDMA writes and
/// reads issued after it wait behind it, so the order of everything the application issues is
/// kept. One-sided operations must then target a region the
/// peer advertised (granted or sent) and not released.
///
/// Teardown, in order: rdma_disconnect (EINVAL: the peer went first) -> DISCONNECTED and every
/// posted work request flushed back (or disconnectTimeout) -> destroy QP, CQ reservation, MRs, id
/// -> onClosed -> the owner frees the object (deferred).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Callbacks.h"
#include "evrdma/CompletionStats.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/ConnectionState.h"
#include "evrdma/MemoryRegion.h"
#include "evrdma/Verbs.h"
#include "evrdma/Watch.h"

namespace evrdma {

class Reactor;
struct CmEvent;
struct Frame;
struct SendOp;
namespace detail {
struct HeldMessage;
class HeldMessages;
class QueuePair;
class FramedSender;
class RegionExchange;
class LendingPool;
class PreparedMappings;
class Liveness;
}  // namespace detail


class Connection {
 public:
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  ConnectionState state() const noexcept { return state_; }
  bool isClient() const noexcept { return isClient_; }
  /// Sends `length` bytes (copied into a registered buffer). Returns 0, or -ENOTCONN (not
  /// established, or closing), -EMSGSIZE (longer than maxMessageSize), -ENOBUFS (every send buffer
  /// is in use: onWritable comes once one is free), or -errno from ibv_post_send. `tag` comes back
  /// in onSendDone.
  int postSend(const void* data, size_t length, uint64_t tag = 0) noexcept;
  /// The same with immediate data: the peer gets onRecvWithImm(imm, data, length). Also
  /// -EOPNOTSUPP on a transport without immediate data (iWARP).
  int postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag = 0) noexcept;
  /// A piece of a registered region, for the zero-copy operations below (see also BufferPool).
  using Slice = evrdma::Slice;
  /// Zero-copy operations. Each is checked before anything is posted: 0, or -ENOTCONN, -EINVAL (no
  /// region), -ERANGE (outside the local region or the remote one), -EACCES (the remote region does
  /// not grant that access, or a read target lacks kLocalWrite), -EMSGSIZE (over 1 GiB),
  /// -EOPNOTSUPP (immediate data on a transport without it, i.e. iWARP), and on a framed
  /// connection -ENOENT (the remote region is not one the peer advertised, or it was released).
  /// When the
  /// send queue is full the request waits, in order, and goes out as room frees (onWritable tells
  /// when that backlog has drained). Completion: onOpDone(tag). The memory must stay registered
  /// and untouched until then.
  int send(const Slice& local, uint64_t tag) noexcept;
  int sendWithImm(const Slice& local, uint32_t imm, uint64_t tag) noexcept;
  int rdmaWrite(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept;
  int rdmaWriteWithImm(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint32_t imm,
                       uint64_t tag) noexcept;
  int rdmaRead(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept;
  /// Whether sendWithImm / rdmaWriteWithImm work here (not on iWARP: they return -EOPNOTSUPP).
  bool supportsImmediateData() const noexcept;
  /// Requests issued between the two go to the device as one linked list (one ibv_post_send);
  /// batches nest, and go out when the outermost ends. Callbacks of completions are inside such a
  /// batch already: what they send goes out, in order, once every completion of that poll of the
  /// CQ has been handed out (one doorbell and one signaled request for a poll's worth of echoes),
  /// and a post that fails there fails the connection (onError) instead of returning -errno.
  void beginBatch() noexcept;
  int endBatch() noexcept;
  /// Memory-region exchange (framed connections; -EPROTONOSUPPORT otherwise, -ENOTCONN when not
  /// established). Asks the peer to allocate and register `bytes` with `access` (kRemoteRead and/or
  /// kRemoteWrite) for us: onRegionGranted(tag, region) or onRegionRefused(tag, err) follows.
  /// -EINVAL for 0 bytes or a bad access, -ENOSPC when maxPeerRegions are held or asked for.
  int requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept;
  /// Advertises one of our regions (it must grant remote access: else -EACCES) to the peer, which
  /// gets onRegionReceived(region, tag). Keep it registered until the connection closes.
  int sendRegion(const MemoryRegion& region, uint64_t tag) noexcept;
  /// Forgets a region the peer advertised and tells the peer (a region it lent is then freed).
  /// Later use of it is refused with -ENOENT. -ENOENT if it is not a region the peer advertised.
  int releaseRegion(const RemoteRegion& region) noexcept;
  /// The peer's regions we may use now; the bytes we registered for the peer.
  const std::vector<RemoteRegion>& peerRegions() const noexcept;
  uint64_t lentBytes() const noexcept;
  /// Framed: our credits (the peer's receives we may still use; a message needs four, see
  /// ConnectionOptions::kMinFramedRecvDepth), and the credits we owe the peer (receives posted
  /// again that it has not been told of yet).
  uint32_t sendCredits() const noexcept;
  uint32_t creditsOwed() const noexcept;
  bool framed() const noexcept { return options_.framed; }
  /// Framed: the largest message the peer takes (its maxMessageSize, from its hello); sends longer
  /// than that are refused with -EMSGSIZE before anything is posted.
  uint64_t peerMaxMessageSize() const noexcept { return peerMaxMessageSize_; }

  /// Requests waiting: behind a full send queue, or (framed) for credits.
  size_t sendBacklog() const noexcept;
  /// What the send queue did (all zero before verbs are set up).
  SendQueueStats sendQueueStats() const noexcept;

  /// Receive-side back-pressure (what bufferevent_disable(EV_READ) is to a socket). While paused,
  /// the messages that arrive (onRecv, onRecvWithImm, and on a framed connection the region
  /// exchange's callbacks) stay in their receive buffers, in order, and those receives are not
  /// posted again. On a framed connection the peer runs out of credits and its sends wait (its
  /// onWritable comes once they went out), while evrdma's own frames (credit returns, keepalive)
  /// go on. resumeReceiving() hands what was held to the handler, in order, from a later loop turn.
  /// Unframed, a paused side takes at most recvDepth messages, after which the peer's sends wait
  /// in RNR retries (rnrRetryCount) on RoCE and break the connection on iWARP: pause framed
  /// connections. May be called before the connection is established. Returns 0, -ENOTCONN
  /// (closing or closed) or -EOPNOTSUPP (unframed through a shared receive queue, whose pool does
  /// not bound what the peer sends).
  int pauseReceiving() noexcept;
  int resumeReceiving() noexcept;
  bool receivingPaused() const noexcept { return receivingPaused_; }
  /// The receive buffers this side keeps posted (ConnectionOptions::recvDepth), and how many of
  /// them the application holds now: messages held while paused, plus (autoPostRecv off) buffers
  /// of delivered messages not given back with postRecv() yet.
  uint32_t recvDepth() const noexcept { return options_.recvDepth; }
  uint32_t receivesHeld() const noexcept;
  /// With autoPostRecv off: re-posts the buffer of one delivered message (called from onRecv, the
  /// one being delivered, once the callback returns). evrdma re-posts the receives its own frames
  /// consume. Returns 0, -ENOTCONN, -ENOBUFS (no delivered message's buffer is waiting) or -errno.
  int postRecv() noexcept;
  /// Starts closing; safe from anywhere, including this connection's own callbacks, and more than
  /// once. onClosed follows, always from a later loop turn.
  void close() noexcept;

  /// 0 if `options` can be used, else -EINVAL with `problem` naming the option at fault.
  static int checkOptions(const ConnectionOptions& options, const char*& problem) noexcept {
    return evrdma::checkOptions(options, problem);
  }

  size_t maxMessageSize() const noexcept { return options_.maxMessageSize; }
  uint32_t freeSendBuffers() const noexcept;
  uint32_t postedRecvs() const noexcept;
  const std::string& peerAddress() const noexcept { return peerAddress_; }
  const ConnectionStats& stats() const noexcept { return stats_; }
  /// The -errno the connection failed with (what onError said), 0 while it has not failed.
  int error() const noexcept { return error_; }
  /// When the object was made, and when it became established (the epoch before that).
  std::chrono::steady_clock::time_point createdAt() const noexcept { return createdAt_; }
  std::chrono::steady_clock::time_point establishedAt() const noexcept { return establishedAt_; }
  ConnectionHandler& handler() const noexcept { return *handler_; }
  Reactor& reactor() const noexcept { return reactor_; }
  /// The statistics of the completion channel this connection's CQ is on (shared by every
  /// connection on its device of this reactor, and kept by the Reactor), once verbs were set up,
  /// also after the connection closed; null before.
  const CompletionStats* completionStats() const noexcept { return completionStats_; }
  /// The device the connection's verbs were set up on (also after it closed); null before. Once
  /// the device is removed its context is closed and this pointer dangles: keep what you need of
  /// it (ibv_get_device_name) while the connection is up.
  ibv_context* device() const noexcept { return device_; }
  rdma_cm_id* cmId() const noexcept { return id_.get(); }
  /// The protection domain of the connection's device (once established; shared by every
  /// connection on that device of this reactor, and freed with the Reactor): register the memory
  /// you use with send() / rdmaWrite() / rdmaRead() here, e.g.
  /// MemoryRegion::allocate(c.protectionDomain(), ...). Such regions outlive the connection.
  ibv_pd* protectionDomain() const noexcept;


 protected:
  Connection(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ConnectionOptions& options,
             bool isClient);

  /// Makes `id` this connection's (its events come here from now on).
  void adoptId(CmId id) noexcept;
  /// The queue pair and its resources on the id's device (large buffers in `prepared`'s memory
  /// where it holds some); posts every receive. Returns 0 or -errno and names the failing call in
  /// `op`.
  int setUpVerbs(const char*& op, detail::PreparedMappings* prepared = nullptr) noexcept;
  /// The connection parameters from the options, carrying `privateData` (which must outlive use).
  rdma_conn_param connParam(const std::vector<uint8_t>& privateData) const noexcept;
  /// Reports an asynchronous failure (unless closing) and tears down; final state Failed.
  void fail(int err, const char* op) noexcept;
  void setState(ConnectionState state) noexcept { state_ = state; }
  bool closing() const noexcept { return teardown_ != Teardown::None; }
  /// The Reactor was destroyed first: the connection is a closed shell (see Reactor).
  bool orphaned() const noexcept { return teardown_ == Teardown::Orphaned; }

  /// The role's part of the CM state machine (see the table above). Each is called only in the
  /// state named, so a role implements those its states can meet.
  /// ResolvingAddr: ADDR_RESOLVED (client).
  virtual void onAddressResolved() noexcept {}
  /// ResolvingRoute: ROUTE_RESOLVED (client).
  virtual void onRouteResolved() noexcept {}
  /// Connecting / Accepting: the peer rejected (REJECTED).
  virtual void onConnectRejected(const CmEvent& event) noexcept = 0;
  /// Connecting / Accepting: UNREACHABLE or CONNECT_ERROR.
  virtual void onConnectFailed(const CmEvent& event) noexcept = 0;
  /// The connection is up, whichever announced it first (ESTABLISHED or a receive).
  virtual void onEstablishedByRole() noexcept {}
  /// After onClosed: the owner frees the object (deferred).
  virtual void onFinished() noexcept = 0;
  /// The Reactor is gone and every resource with it; no callback may fire. The owner may free the
  /// object now (a Client whose Ptr was dropped does).
  virtual void onOrphaned() noexcept {}

  Reactor& reactor_;
  std::unique_ptr<ConnectionHandler> handler_;
  ConnectionOptions options_;
  std::string peerAddress_ = "?";

 private:
  /// Receives the CM events, completions, device events and the Reactor's end for this connection
  /// (and the region exchange's news), and hands them to the methods below.
  class Sink;
  friend class Sink;

  void onCmEvent(const CmEvent& event) noexcept;
  void onCompletion(const ibv_wc& wc) noexcept;
  void onSendCompletion(const ibv_wc& wc) noexcept;
  void onReceiveCompletion(const ibv_wc& wc) noexcept;
  void onAsyncError(ibv_event_type type) noexcept;
  void onCompletionQueueError(int err, const char* op) noexcept;
  /// DEVICE_REMOVAL for this connection's id: every connection on the device is told.
  void onDeviceGone() noexcept;
  /// The device is going away (any id's DEVICE_REMOVAL, or DEVICE_FATAL): onError(-ENODEV), and
  /// teardown finishes at once (no flush will come).
  void onDeviceRemoved() noexcept;
  void onReactorGone() noexcept;
  void onDisconnectedEvent() noexcept;
  void afterPeerDisconnected() noexcept;  ///< what the peer sent before it left was handed out
  /// The transport is up (ESTABLISHED, or the first receive that beats it: `peerSpoke`):
  /// unframed, the connection is established; framed, our hello goes out (the agent's only once
  /// the client's has arrived) and the peer's is awaited.
  void transportUp(bool peerSpoke) noexcept;
  /// The peer's first work reached us (a receive completed, even in error): the connection is up,
  /// whatever the CM has said so far.
  void notePeerReached() noexcept;
  /// The connection is established for the application (onEstablished).
  void markEstablished() noexcept;
  /// Receiving. A successful receive: a protocol frame is handled and its receive posted again;
  /// a message is delivered, or held while receiving is paused (or earlier ones are still held).
  void onMessage(const detail::HeldMessage& message) noexcept;
  /// Hands one message to the handler, then posts its receive again or keeps it for postRecv().
  /// `parsed`: its frame as onMessage parsed it (framed), or null to parse it (held, or unframed).
  void deliver(const detail::HeldMessage& message, const Frame* parsed) noexcept;
  /// The messages held while paused, in order, until paused again or closing (resumeReceiving's
  /// later turn).
  void deliverHeld() noexcept;
  /// Posts a consumed receive again (or keeps it, when closing or not yet established).
  void postReceiveAgain(uint32_t slot) noexcept;
  /// Tells the credit ledger how many receives the application holds.
  void noteReceivesHeld() noexcept;

  /// Sending.
  int copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  int checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset, bool hasImm,
                    uint32_t imm, uint64_t tag) noexcept;
  /// Framed or not, the request goes its way (waiting for credits, or to the send queue).
  int dispatch(const SendOp& op, uint8_t* copiedHeader) noexcept;
  /// To the send queue; a failed post fails the connection (on a later turn).
  int submit(const SendOp& op) noexcept;
  void noteBacklog() noexcept;
  void notifyWritableIfDrained() noexcept;
  bool sendable() const noexcept { return state_ == ConnectionState::Established && !closing(); }
  /// A consumed receive buffer not posted again now: kept (closing), or, from a shared receive
  /// queue, given back to its pool.
  void keepReceive(uint32_t slot) noexcept;
  /// Posts a consumed receive again (and, framed, owes the peer a credit for it).
  int repostRecv(uint32_t slot) noexcept;

  /// Teardown.
  void releaseResources() noexcept;
  /// fail() for an error met inside a call of the application's: onError comes on a later turn.
  void failLater(int err, const char* op) noexcept;
  void logFailure(int err, const char* op) const noexcept;
  /// keepaliveInterval / idleTimeout: starts the liveness checks (once established).
  void startLivenessChecks() noexcept;
  void onLivenessTick() noexcept;
  /// Messages either way and operations completed: what idleTimeout watches.
  uint64_t activity() const noexcept;
  /// Reports an operation that will never complete normally (flushed, or dropped unposted).
  void reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept;
  void beginTeardown() noexcept;
  void disconnect() noexcept;  ///< rdma_disconnect, once teardown has begun
  void maybeFinish() noexcept;
  void scheduleFinish() noexcept;
  void finish() noexcept;

  /// The teardown's phases. Past None a connection never returns to it; an agent closing early
  /// waits in AwaitingEstablished, then disconnects; the last three come in order, only forward.
  enum class Teardown : uint8_t {
    None,                 ///< open: no close() yet, no failure
    AwaitingEstablished,  ///< an agent closing before the CM said ESTABLISHED: rdma_disconnect once it does
    Disconnecting,        ///< waiting for DISCONNECTED and every posted request flushed back
    FinishScheduled,      ///< all back (or disconnectTimeout ran out): finish() on a later turn
    Finished,             ///< resources released, onClosed called
    Orphaned,             ///< the Reactor went first: released without a word to the application
  };
  bool finished() const noexcept { return teardown_ >= Teardown::Finished; }

  const bool isClient_;
  ConnectionState state_ = ConnectionState::Idle;
  Teardown teardown_ = Teardown::None;
  bool failed_ = false;
  /// DISCONNECTED seen, rdma_disconnect refused, or no disconnect needed (may come before close())
  bool disconnectDone_ = false;
  bool deviceGone_ = false;
  bool closeRequested_ = false;  ///< the application called close()
  bool helloSent_ = false;       ///< framed: our hello is out
  bool peerReached_ = false;     ///< a receive completed: the transport is up (see notePeerReached)
  bool cmEstablished_ = false;   ///< the CM's ESTABLISHED event arrived
  uint64_t peerMaxMessageSize_ = 0;  ///< framed: from the peer's hello
  bool backlogged_ = false;  ///< something had to wait: onWritable once it all went out
  std::string errorText_;       ///< keeps an onError `op` alive while the callback runs
  std::string laterErrorText_;  ///< the same for failLater's deferred onError
  ConnectionStats stats_;
  int error_ = 0;
  std::chrono::steady_clock::time_point createdAt_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point establishedAt_{};
  const CompletionStats* completionStats_ = nullptr;
  ibv_context* device_ = nullptr;

  std::unique_ptr<Sink> sink_;
  /// Declared in creation order: destroyed in reverse (the parts, then the id).
  CmId id_;
  std::unique_ptr<detail::QueuePair> queuePair_;
  std::unique_ptr<detail::FramedSender> framedSender_;      ///< framed connections only
  std::unique_ptr<detail::LendingPool> lendingPool_;  ///< lendingPoolBytes: outlives what it lent
  std::unique_ptr<detail::RegionExchange> regionExchange_;  ///< framed connections only
  std::vector<SendOp> dropped_;  ///< never posted (teardown): reported as flushed before onClosed
  std::vector<uint32_t> idleRecvSlots_;  ///< consumed, not re-posted (autoPostRecv off)
  /// Receive-side back-pressure (pauseReceiving): what arrived while paused, in order.
  bool receivingPaused_ = false;
  std::unique_ptr<detail::HeldMessages> heldMessages_;
  Timer deliverHeldTimer_;
  /// autoPostRecv off: the message being delivered, whose buffer postRecv() may claim from onRecv.
  int64_t deliveringSlot_ = -1;
  bool repostDelivered_ = false;
  Timer disconnectTimer_;
  /// Liveness (keepaliveInterval, idleTimeout): counters compared at each tick of the timer, so
  /// the data path only counts.
  Timer livenessTimer_;
  /// Work flushed while the connection was up: the QP went to the error state. A disconnect that
  /// follows (iWARP may flush before DISCONNECTED) explains it; if none comes within this, the
  /// connection fails (rxe moves a QP to the error state and says nothing else, e.g. after a peer's
  /// refused RDMA access).
  static constexpr std::chrono::milliseconds kUnexplainedFlushGrace{2000};
  Timer unexplainedFlushTimer_;
  void noteUnexplainedFlush() noexcept;
  uint64_t receivesSeen_ = 0;  ///< every successful receive, the protocol's own frames included
  std::unique_ptr<detail::Liveness> liveness_;  ///< once established, with keepalive or idleTimeout
};

}  // namespace evrdma
