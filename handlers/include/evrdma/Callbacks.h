/// \file
/// What an application implements: the callbacks of a connection (ConnectionHandler) and the
/// listener's decision on each connect request (AgentFactory). Every callback runs on the reactor's
/// loop, must not throw (they are noexcept), and may call anything on its connection, including
/// close() and postSend(). A connection is never destroyed while one of its callbacks runs: its
/// destruction is deferred, and onClosed is always its last callback.
#pragma once

#include <infiniband/verbs.h>  // ibv_wc_status

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/ConnectionOptions.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma {

class Connection;
class Agent;

/// What a zero-copy operation does (Connection::send, rdmaWrite, rdmaWriteWithImm, rdmaRead).
enum class OpType : uint8_t { Send, Write, WriteWithImm, Read };
const char* toString(OpType type) noexcept;

/// A finished send, RDMA write or RDMA read posted with Connection::send / rdmaWrite / ... .
struct OpCompletion {
  uint64_t tag = 0;
  OpType type = OpType::Send;
  ibv_wc_status status = IBV_WC_SUCCESS;  ///< anything else: the connection fails (onError follows)
  size_t bytes = 0;
};

/// Why a connection attempt was rejected.
struct RejectInfo {
  int status = 0;                    ///< the transport's code (IB: 28 = rejected by the consumer)
  std::string reason;                ///< the reason the peer's evrdma Listener gave, or a description
  bool reasonFromPeer = false;       ///< true when `reason` came from the peer
  std::vector<uint8_t> privateData;  ///< the raw reject private data (possibly padded)
};

class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  /// The connection is up: postSend() may be called from now on.
  virtual void onEstablished(Connection&) noexcept {}
  /// One message arrived. `data` is valid until the callback returns (the buffer is re-posted then).
  virtual void onRecv(Connection&, const uint8_t* /*data*/, size_t /*length*/) noexcept {}
  /// A message with immediate data arrived: a send with immediate (`data`, `length` are the message,
  /// valid until the callback returns), or an RDMA write with immediate (`data` is null and `length`
  /// is how many bytes the peer wrote into the region it targeted).
  virtual void onRecvWithImm(Connection&, uint32_t /*imm*/, const uint8_t* /*data*/, size_t /*length*/) noexcept {}
  /// The postSend() with `tag` completed: its buffer slot is free again. (Not called for sends the
  /// connection's teardown flushed: their buffers were evrdma's own.)
  virtual void onSendDone(Connection&, uint64_t /*tag*/) noexcept {}
  /// A send(), rdmaWrite(), rdmaWriteWithImm() or rdmaRead() completed; its memory may be reused.
  /// Every one that returned 0 gets exactly one onOpDone, also when the connection closes under it
  /// (status IBV_WC_WR_FLUSH_ERR: flushed, or never posted), always before onClosed.
  virtual void onOpDone(Connection&, const OpCompletion&) noexcept {}
  /// Everything that had to wait (behind a full send queue, or for the peer's credits on a framed
  /// connection) has been posted; or a postSend() refused with -ENOBUFS may be tried again (a
  /// send buffer is free).
  virtual void onWritable(Connection&) noexcept {}
  /// Framed connections: memory-region exchange (see Connection::requestRegion / sendRegion).
  /// The peer granted our requestRegion(`tag`): `region` is ours to read / write until we
  /// releaseRegion() it or the connection closes.
  virtual void onRegionGranted(Connection&, uint64_t /*tag*/, const RemoteRegion& /*region*/) noexcept {}
  /// The peer refused our requestRegion(`tag`): `err` is -errno (-EACCES: it lends nothing, its
  /// maxLentBytes is 0; -ENOMEM: over its maxLentBytes or its memory budget; -ENOSPC: as many
  /// regions as its maxLentRegions).
  virtual void onRegionRefused(Connection&, uint64_t /*tag*/, int /*err*/) noexcept {}
  /// The peer sent one of its regions with sendRegion(`tag`).
  virtual void onRegionReceived(Connection&, const RemoteRegion& /*region*/, uint64_t /*tag*/) noexcept {}
  /// We registered `region` because the peer asked for it; it stays registered (and valid to
  /// look at) until the peer releases it (onRegionReleased) or the connection closes (it goes
  /// before onClosed).
  virtual void onRegionLent(Connection&, const MemoryRegion& /*region*/) noexcept {}
  /// The peer released a region we lent it (onRegionLent): `region` is still valid during this
  /// call and gone after it; drop every pointer into it here.
  virtual void onRegionReleased(Connection&, const MemoryRegion& /*region*/) noexcept {}
  /// The peer disconnected (or the connection broke); the connection now closes itself.
  virtual void onDisconnected(Connection&) noexcept {}
  /// Client only: the peer refused the connection. onClosed follows.
  virtual void onRejected(Connection&, const RejectInfo&) noexcept {}
  /// An asynchronous failure: `err` is -errno, `op` names what failed (valid during the call).
  /// The connection closes itself afterwards: onClosed follows.
  virtual void onError(Connection&, int /*err*/, const char* /*op*/) noexcept {}
  /// The last callback: every RDMA resource of the connection has been released.
  virtual void onClosed(Connection&) noexcept {}
};

/// A connect request as the Listener's factory sees it.
struct ConnectRequest {
  std::string peerAddress;                 ///< "address:port"
  const std::vector<uint8_t>& privateData;  ///< as delivered: may be padded (see PrivateData.h)
  uint8_t initiatorDepth = 0;              ///< the peer's RDMA read parameters
  uint8_t responderResources = 0;
};

/// The factory's answer: accept with a handler, or reject with a reason the client can read.
struct AcceptDecision {
  std::unique_ptr<ConnectionHandler> handler;  ///< null = reject
  ConnectionOptions options;
  std::vector<uint8_t> privateData;  ///< sent with the accept (checked against the transport's limit)
  std::string rejectReason;

  static AcceptDecision accept(std::unique_ptr<ConnectionHandler> handler, ConnectionOptions options = {},
                               std::vector<uint8_t> privateData = {}) {
    AcceptDecision d;
    d.handler = std::move(handler);
    d.options = options;
    d.privateData = std::move(privateData);
    return d;
  }
  static AcceptDecision reject(std::string reason) {
    AcceptDecision d;
    d.rejectReason = std::move(reason);
    return d;
  }
};

class AgentFactory {
 public:
  virtual ~AgentFactory() = default;
  /// Decides on one connect request. Called on the loop; must not throw.
  virtual AcceptDecision onConnectRequest(const ConnectRequest& request) noexcept = 0;
  /// An asynchronous failure of the listening id itself (e.g. the device went away).
  virtual void onListenerError(int /*err*/, const char* /*op*/) noexcept {}
};

}  // namespace evrdma
