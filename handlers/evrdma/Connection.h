// Connection: what an Agent (server side) and a Client share: one RC connection, its cm_id, its
// entries on a shared CQ, its QP and registered buffers (all RAII; the PD is the device's), its
// explicit state, and the application's handler.
//
// The rule for every CM event in every state (one switch, in Connection::onCmEvent):
//   ADDR_RESOLVED      ResolvingAddr  -> resolve the route               -> ResolvingRoute
//   ROUTE_RESOLVED     ResolvingRoute -> set up verbs, rdma_connect      -> Connecting
//   ADDR_ERROR         ResolvingAddr  -> onError(status, "rdma_resolve_addr")      -> Failed
//   ROUTE_ERROR        ResolvingRoute -> onError(status, "rdma_resolve_route")     -> Failed
//   ESTABLISHED        Connecting / Accepting -> onEstablished            -> Established
//                      Established    -> nothing (a receive may announce the connection first)
//   REJECTED           Connecting     -> onRejected(reason), or onError(-ECONNREFUSED) when nobody
//                                        listens there                   -> Closed / Failed
//   UNREACHABLE,
//   CONNECT_ERROR      Connecting / Accepting -> onError(...)           -> Failed
//   DISCONNECTED       Established    -> deliver the completions already in the CQ (a message
//                                        the peer sent before it left reaches onRecv first),
//                                        then onDisconnected, disconnect our side, drain -> Closed
//                      Disconnecting  -> the disconnect finished, drain  -> Closed
//                      Connecting / Accepting -> onError(-ECONNRESET)   -> Failed
//   TIMEWAIT_EXIT,
//   ADDR_CHANGE        any            -> nothing: informational, the connection is unaffected
//   DEVICE_REMOVAL     any            -> onError(-ENODEV, "device removal"), resources released at
//                                        once (no flush will come)      -> Failed
//   anything else      any            -> onError(-EPROTO, "unexpected CM event ...") -> Failed
// Once close() was called (or teardown began), events and completions only drive the teardown:
// the application hears nothing more but onOpDone for each operation still outstanding (with
// status IBV_WC_WR_FLUSH_ERR when the teardown flushed it or it was never posted: every send(),
// rdmaWrite(), rdmaRead()... that returned 0 gets exactly one onOpDone, so the memory it used
// can always be given back), then onClosed.
//
// Framed connections (ConnectionOptions::framed, both sides): every message carries a Frame
// header. Each side's first frame is a hello with its maxMessageSize: onEstablished comes once the
// peer's has arrived, and a send longer than the peer takes is refused (-EMSGSIZE) before posting.
// Sends, sends with immediate, RDMA writes with immediate and the protocol's own frames each
// spend one credit (one of the peer's posted receives, see CreditLedger); without one they
// wait, in order, and RDMA writes and reads issued after them wait behind them, so the order of
// everything the application issues is kept. One-sided operations must then target a region the
// peer advertised (granted or sent) and not released.
//
// Teardown, in order: rdma_disconnect (EINVAL: the peer went first) -> DISCONNECTED and every
// posted work request flushed back (or disconnectTimeout) -> destroy QP, CQ reservation, MRs, id
// -> onClosed -> the owner frees the object (deferred).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/BufferPool.h"
#include "evrdma/Callbacks.h"
#include "evrdma/CmDispatcher.h"
#include "evrdma/CompletionDispatcher.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/CreditLedger.h"
#include "evrdma/Frame.h"
#include "evrdma/MemoryRegion.h"
#include "evrdma/Reactor.h"
#include "evrdma/SendQueue.h"
#include "evrdma/Verbs.h"
#include "evrdma/Watch.h"

namespace evrdma {

enum class ConnectionState {
  Idle,            // created, nothing started
  ResolvingAddr,   // client: rdma_resolve_addr in progress
  ResolvingRoute,  // client: rdma_resolve_route in progress
  Connecting,      // client: rdma_connect sent, waiting for the answer
  Accepting,       // agent: rdma_accept sent, waiting for ESTABLISHED
  Established,     // data may flow
  Disconnecting,   // teardown: waiting for DISCONNECTED and flushed work requests
  Closed,          // final: resources released after a clean close
  Failed,          // final: resources released after an error
};
const char* toString(ConnectionState state) noexcept;

class Connection : private CmEventHandler, private CompletionHandler, private detail::ReactorMember {
 public:
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  ConnectionState state() const noexcept { return state_; }
  bool isClient() const noexcept { return isClient_; }
  // Sends `length` bytes (copied into a registered buffer). Returns 0, or -ENOTCONN (not
  // established, or closing), -EMSGSIZE (longer than maxMessageSize), -ENOBUFS (every send buffer
  // is in use: wait for onSendDone), or -errno from ibv_post_send. `tag` comes back in onSendDone.
  int postSend(const void* data, size_t length, uint64_t tag = 0) noexcept;
  // The same with immediate data: the peer gets onRecvWithImm(imm, data, length). Also
  // -EOPNOTSUPP on a transport without immediate data (iWARP).
  int postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag = 0) noexcept;
  // A piece of a registered region, for the zero-copy operations below (see also BufferPool).
  using Slice = evrdma::Slice;
  // Zero-copy operations. Each is checked before anything is posted: 0, or -ENOTCONN, -EINVAL (no
  // region), -ERANGE (outside the local region or the remote one), -EACCES (the remote region does
  // not grant that access, or a read target lacks kLocalWrite), -EMSGSIZE (over 1 GiB),
  // -EOPNOTSUPP (immediate data on a transport without it, i.e. iWARP), and on a framed
  // connection -ENOENT (the remote region is not one the peer advertised, or it was released).
  // When the
  // send queue is full the request waits, in order, and goes out as room frees (onWritable tells
  // when that backlog has drained). Completion: onOpDone(tag). The memory must stay registered
  // and untouched until then.
  int send(const Slice& local, uint64_t tag) noexcept;
  int sendWithImm(const Slice& local, uint32_t imm, uint64_t tag) noexcept;
  int rdmaWrite(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept;
  int rdmaWriteWithImm(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint32_t imm,
                       uint64_t tag) noexcept;
  int rdmaRead(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept;
  // Whether sendWithImm / rdmaWriteWithImm work here (not on iWARP: they return -EOPNOTSUPP).
  bool supportsImmediateData() const noexcept;
  // Requests issued between the two go to the device as one linked list (one ibv_post_send);
  // batches nest, and go out when the outermost ends.
  void beginBatch() noexcept;
  int endBatch() noexcept;
  // Memory-region exchange (framed connections; -EPROTONOSUPPORT otherwise, -ENOTCONN when not
  // established). Asks the peer to allocate and register `bytes` with `access` (kRemoteRead and/or
  // kRemoteWrite) for us: onRegionGranted(tag, region) or onRegionRefused(tag, err) follows.
  // -EINVAL for 0 bytes or a bad access, -ENOSPC when maxPeerRegions are held or asked for.
  int requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept;
  // Advertises one of our regions (it must grant remote access: else -EACCES) to the peer, which
  // gets onRegionReceived(region, tag). Keep it registered until the connection closes.
  int sendRegion(const MemoryRegion& region, uint64_t tag) noexcept;
  // Forgets a region the peer advertised and tells the peer (a region it lent is then freed).
  // Later use of it is refused with -ENOENT. -ENOENT if it is not a region the peer advertised.
  int releaseRegion(const RemoteRegion& region) noexcept;
  // The peer's regions we may use now; the bytes we registered for the peer.
  const std::vector<RemoteRegion>& peerRegions() const noexcept { return peerRegions_; }
  uint64_t lentBytes() const noexcept { return lentBytes_; }
  // Framed: our credits (the peer's receives we may still use) and those we owe the peer.
  const CreditLedger& credits() const noexcept { return ledger_; }
  bool framed() const noexcept { return options_.framed; }
  // Framed: the largest message the peer takes (its maxMessageSize, from its hello); sends longer
  // than that are refused with -EMSGSIZE before anything is posted.
  uint64_t peerMaxMessageSize() const noexcept { return peerMaxMessageSize_; }

  // Requests waiting: behind a full send queue, or (framed) for credits.
  size_t sendBacklog() const noexcept { return waiting_.size() + (sendQueue_ ? sendQueue_->backlog() : 0); }
  const SendQueue* sendQueue() const noexcept { return sendQueue_.get(); }

  // With autoPostRecv off: re-posts one consumed receive buffer. Returns 0, -ENOTCONN, -ENOBUFS
  // (every buffer is already posted) or -errno.
  int postRecv() noexcept;
  // Starts closing; safe from anywhere, including this connection's own callbacks, and more than
  // once. onClosed follows, always from a later loop turn.
  void close() noexcept;

  // 0 if `options` can be used, else -EINVAL with `problem` naming the option at fault.
  static int checkOptions(const ConnectionOptions& options, const char*& problem) noexcept;

  size_t maxMessageSize() const noexcept { return options_.maxMessageSize; }
  uint32_t freeSendBuffers() const noexcept { return sendBuffers_.available(); }
  uint32_t postedRecvs() const noexcept { return postedRecvs_; }
  const std::string& peerAddress() const noexcept { return peerAddress_; }
  const ConnectionStats& stats() const noexcept { return stats_; }
  ConnectionHandler& handler() const noexcept { return *handler_; }
  Reactor& reactor() const noexcept { return reactor_; }
  // The completion channel this connection's CQ is on (its statistics), once verbs are set up.
  const CompletionDispatcher* completions() const noexcept { return completions_; }
  rdma_cm_id* cmId() const noexcept { return id_.get(); }
  // The protection domain of the connection's device (once established; shared by every
  // connection on that device of this reactor, and freed with the Reactor): register the memory
  // you use with send() / rdmaWrite() / rdmaRead() here, e.g.
  // MemoryRegion::allocate(c.protectionDomain(), ...). Such regions outlive the connection.
  ibv_pd* protectionDomain() const noexcept { return pd_; }

 protected:
  Connection(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ConnectionOptions& options,
             bool isClient);

  // Makes `id` this connection's (its events come here from now on).
  void adoptId(CmId id) noexcept;
  // Buffers and MRs (on the device's PD), CQ entries, QP on the id's device; posts every receive.
  // Returns 0 or -errno and names the failing call in `op`.
  int setUpVerbs(const char*& op) noexcept;
  // The connection parameters from the options, carrying `privateData` (which must outlive use).
  rdma_conn_param connParam(const std::vector<uint8_t>& privateData) const noexcept;
  // Reports an asynchronous failure (unless closing) and tears down; final state Failed.
  void fail(int err, const char* op) noexcept;
  void setState(ConnectionState state) noexcept { state_ = state; }
  // The transport is up (ESTABLISHED, or the first receive that beats it: `peerSpoke`):
  // unframed, the connection is established; framed, our hello goes out (the agent's only once
  // the client's has arrived) and the peer's is awaited.
  void transportUp(bool peerSpoke) noexcept;
  // The connection is established for the application (onEstablished).
  void markEstablished() noexcept;
  bool closing() const noexcept { return teardownStarted_; }
  // The Reactor was destroyed first: the connection is a closed shell (see Reactor).
  bool orphaned() const noexcept { return orphaned_; }

  // The role's CM events (those not handled in common); return false if unexpected.
  virtual bool onRoleCmEvent(const CmEvent& event) noexcept = 0;
  // The connection is up, whichever announced it first (ESTABLISHED or a receive).
  virtual void onEstablishedByRole() noexcept {}
  // After onClosed: the owner frees the object (deferred).
  virtual void onFinished() noexcept = 0;
  // The Reactor is gone and every resource with it; no callback may fire. The owner may free the
  // object now (a Client whose Ptr was dropped does).
  virtual void onOrphaned() noexcept {}

  Reactor& reactor_;
  std::unique_ptr<ConnectionHandler> handler_;
  ConnectionOptions options_;
  std::string peerAddress_ = "?";

 private:
  void onCmEvent(const CmEvent& event) noexcept override;
  void onCompletion(const ibv_wc& wc) noexcept override;
  void onAsyncError(ibv_event_type type) noexcept override;
  void onCompletionQueueError(int err, const char* op) noexcept override;
  // DEVICE_REMOVAL for this connection's id: every connection on the device is told.
  void onDeviceGone() noexcept;
  // The device is going away (any id's DEVICE_REMOVAL, or DEVICE_FATAL): onError(-ENODEV), and
  // teardown finishes at once (no flush will come).
  void onDeviceRemoved() noexcept override;
  void onReactorGone() noexcept override;
  void releaseResources() noexcept;
  // fail() for an error met inside a call of the application's: onError comes on a later turn.
  void failLater(int err, const char* op) noexcept;
  // Reports an operation that will never complete normally (flushed, or dropped unposted).
  void reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept;
  void beginTeardown() noexcept;
  void maybeFinish() noexcept;
  void scheduleFinish() noexcept;
  void finish() noexcept;
  int postRecvSlot(uint32_t slot) noexcept;
  // Posts a consumed receive again (and, framed, owes the peer a credit for it).
  int repostRecv(uint32_t slot) noexcept;
  // Bytes per send / receive buffer: a framed message carries its header in the same buffer.
  // (at least the largest protocol frame: a hello or region offer must fit the smallest buffers).
  size_t bufferSize() const noexcept {
    if (!options_.framed) return options_.maxMessageSize;
    return Frame::kHeaderSize + std::max<size_t>(options_.maxMessageSize, Frame::kLargestControlPayload);
  }
  // A request on its way out. On framed connections it may first wait for a credit or a frame
  // slot (where its header or the whole protocol frame is written when it goes out).
  struct Pending {
    SendOp op;
    bool spendsCredit = false;     // uses one of the peer's receives
    uint8_t* headerAt = nullptr;   // a header already written (copy path): its credits are filled in
    bool zeroCopyHeader = false;   // framed send(): the header goes in a frame slot
    std::vector<uint8_t> control;  // a whole protocol frame, copied into a frame slot
    bool countedWait = false;      // stats_.creditWaits counted it
  };
  int copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept;
  int submit(SendOp op) noexcept;
  int enqueue(Pending pending) noexcept;
  int pumpWaiting() noexcept;
  void maybeSendCreditFrame() noexcept;
  // Takes a free frame slot for `op` (the caller checked there is one); returns its memory.
  uint8_t* takeFrameSlot(SendOp& op) noexcept;
  void notifyWritableIfDrained() noexcept;
  int sendControl(std::vector<uint8_t> frame) noexcept;
  void onFrame(const Frame& frame, const ibv_wc& wc) noexcept;
  bool advertisedByPeer(const RemoteRegion& remote) const noexcept;
  void onRegionRequest(const Frame& frame) noexcept;
  void onRegionRelease(const Frame& frame) noexcept;
  int checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset, bool hasImm,
                    uint32_t imm, uint64_t tag) noexcept;
  void onSendCompletion(const ibv_wc& wc) noexcept;
  uint64_t wrIdBase() const noexcept {
    return uint64_t{completion_->serial()} << CompletionDispatcher::kSerialShift;
  }

  const bool isClient_;
  bool orphaned_ = false;
  ConnectionState state_ = ConnectionState::Idle;
  bool teardownStarted_ = false;
  bool failed_ = false;
  bool disconnectDone_ = false;  // DISCONNECTED seen (or no disconnect needed)
  bool deviceGone_ = false;
  bool closeRequested_ = false;  // the application called close()
  bool helloSent_ = false;  // framed: our hello is out
  uint64_t peerMaxMessageSize_ = 0;  // framed: from the peer's hello
  bool finishScheduled_ = false;
  bool finished_ = false;
  std::string errorText_;  // keeps an onError `op` alive while the callback runs
  std::string laterErrorText_;  // the same for failLater's deferred onError

  // Declared in creation order: destroyed in reverse (QP, CQ reservation, MRs, buffers, id); the
  // protection domain is the device's (see protectionDomain()).
  CmId id_;
  ibv_pd* pd_ = nullptr;
  MemoryRegion recvBuffers_;  // the receive ring, bufferSize() per slot
  BufferPool sendBuffers_;    // postSend()'s buffers
  CompletionDispatcher* completions_ = nullptr;
  std::unique_ptr<CompletionDispatcher::Attachment> completion_;  // entries on a shared CQ
  CmQueuePair qp_;
  std::unique_ptr<SendQueue> sendQueue_;
  BufferPool frameSlots_;  // framed: headers of zero-copy sends, and protocol frames
  std::deque<Pending> waiting_;
  std::vector<SendOp> dropped_;  // never posted (teardown): reported as flushed before onClosed
  bool backlogged_ = false;  // something had to wait: onWritable once it all went out
  CreditLedger ledger_;
  // Memory-region exchange.
  struct RegionRequest {
    uint64_t id, tag, bytes;
    uint32_t access;
  };
  std::vector<RegionRequest> regionRequests_;  // ours, unanswered
  uint64_t nextRequestId_ = 1;
  std::vector<RemoteRegion> peerRegions_;      // advertised by the peer, not released
  std::vector<std::unique_ptr<MemoryRegion>> lent_;  // registered for the peer
  std::vector<RemoteRegion> offered_;          // ours, sent with sendRegion
  uint64_t lentBytes_ = 0;

  std::vector<uint32_t> idleRecvSlots_;  // consumed, not re-posted (autoPostRecv off)
  uint32_t postedRecvs_ = 0;
  ConnectionStats stats_;
  Timer disconnectTimer_;
};

}  // namespace evrdma
