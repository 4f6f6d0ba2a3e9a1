/// \file
/// Connection: what an Agent (server side) and a Client share: one RC connection, its explicit
/// state, the application's handler, sending and receiving, and the close. What it holds is
/// behind an implementation object (ConnectionCore, not installed), so this header is the API.
///
/// The rule for every CM event in every state (one switch, in ConnectionCore::onCmEvent):
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
class ConnectionCore;

class Connection {
 public:
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  ConnectionState state() const noexcept;
  bool isClient() const noexcept;
  /// Sends `length` bytes (copied into a registered buffer). Returns 0, or -ENOTCONN (not
  /// established, or closing), -EMSGSIZE (longer than maxMessageSize), -ENOBUFS (every send buffer
  /// is in use: onWritable comes once one is free), or -errno from ibv_post_send. `tag` comes back
  /// in onSendDone.
  int postSend(const void* data, size_t length, uint64_t tag = 0) noexcept;
  /// The same with immediate data: the peer gets onRecvWithImm(imm, data, length). Also
  /// -EOPNOTSUPP on a transport without immediate data (iWARP).
  int postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag = 0) noexcept;
  /// From inside onRecv (or onRecvWithImm for a send with immediate): sends the message being
  /// delivered back to the peer as it is, without copying it (an echo; a framed connection
  /// rewrites the header in place, the immediate value is not sent). Its receive buffer leaves the
  /// receive ring in exchange for a spare one (ConnectionOptions::spareRecvBuffers), so the
  /// receive is posted again at once and the peer's credits do not wait for the send; the buffer
  /// is a spare again once the send completes, never before. onSendDone(tag) follows, as for
  /// postSend. Returns 0, or -EINVAL (not inside onRecv, the message was sent or lent already, or
  /// it has no bytes: an RDMA write with immediate), -ENOBUFS (no spare buffer is free: every one
  /// is on its way out; postSend copies instead), -EOPNOTSUPP (a shared receive queue: its buffers
  /// are the pool's), -EMSGSIZE (framed: longer than the peer takes), -ENOTCONN.
  int sendReceived(uint64_t tag = 0) noexcept;
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
  bool framed() const noexcept;
  /// Framed: the largest message the peer takes (its maxMessageSize, from its hello); sends longer
  /// than that are refused with -EMSGSIZE before anything is posted.
  uint64_t peerMaxMessageSize() const noexcept;

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
  /// If the peer leaves (disconnects) meanwhile, what was held is handed out, in order, before
  /// onDisconnected, paused or not: the peer's sends completed, it cannot be held back any more,
  /// and nothing it sent before it left is lost (as over TCP, where it waits in the socket).
  /// Unframed, a paused side takes at most recvDepth messages, after which the peer's sends wait
  /// in RNR retries (rnrRetryCount) on RoCE and break the connection on iWARP: pause framed
  /// connections. May be called before the connection is established. Returns 0, -ENOTCONN
  /// (closing or closed) or -EOPNOTSUPP (unframed through a shared receive queue, whose pool does
  /// not bound what the peer sends).
  int pauseReceiving() noexcept;
  int resumeReceiving() noexcept;
  bool receivingPaused() const noexcept;
  /// The receive buffers this side keeps posted (ConnectionOptions::recvDepth), and how many of
  /// them the application holds now: messages held while paused, plus (autoPostRecv off) buffers
  /// of delivered messages not given back with postRecv() yet.
  uint32_t recvDepth() const noexcept;
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

  size_t maxMessageSize() const noexcept;
  uint32_t freeSendBuffers() const noexcept;
  uint32_t postedRecvs() const noexcept;
  const std::string& peerAddress() const noexcept;
  const ConnectionStats& stats() const noexcept;
  /// The -errno the connection failed with (what onError said), 0 while it has not failed.
  int error() const noexcept;
  /// When the object was made, and when it became established (the epoch before that).
  std::chrono::steady_clock::time_point createdAt() const noexcept;
  std::chrono::steady_clock::time_point establishedAt() const noexcept;
  ConnectionHandler& handler() const noexcept;
  Reactor& reactor() const noexcept;
  /// The statistics of the completion channel this connection's CQ is on (shared by every
  /// connection on its device of this reactor, and kept by the Reactor), once verbs were set up,
  /// also after the connection closed; null before.
  const CompletionStats* completionStats() const noexcept;
  /// The device the connection's verbs were set up on (also after it closed); null before. Once
  /// the device is removed its context is closed and this pointer dangles: keep what you need of
  /// it (ibv_get_device_name) while the connection is up.
  ibv_context* device() const noexcept;
  rdma_cm_id* cmId() const noexcept;
  /// The protection domain to register the memory you use with send() / rdmaWrite() / rdmaRead()
  /// on, e.g. MemoryRegion::allocate(c.protectionDomain(), ...) (once established). The device's,
  /// shared by every connection on that device of this reactor and freed with the Reactor: such
  /// regions outlive the connection and serve the others too. Or, for a connection that lends
  /// memory or has ConnectionOptions::ownProtectionDomain, the connection's own: regions on it
  /// serve this connection alone (its peer only can reach those it was given), and the domain is
  /// freed once the last of them is deregistered (they may outlive the connection).
  ibv_pd* protectionDomain() const noexcept;

 protected:
  /// Takes `core` (a role's: a Client's or an Agent's) and becomes the object its callbacks name.
  explicit Connection(std::unique_ptr<ConnectionCore> core) noexcept;

  /// What the connection holds behind this API (not installed: evrdma's own objects reach it
  /// without an accessor here).
  std::unique_ptr<ConnectionCore> core_;
};

}  // namespace evrdma
