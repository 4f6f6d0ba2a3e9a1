/// \file
/// Options of one connection, and its counters.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace evrdma {

struct ConnectionOptions {
  /// The fewest receives a framed connection works with: three kept for evrdma's protocol frames
  /// (credit returns, keepalive), which go on while the application holds the rest, and two for
  /// data (with one, every credit would have to come back before each message).
  static constexpr uint32_t kMinFramedRecvDepth = 5;
  /// The largest message, and the largest zero-copy operation.
  static constexpr size_t kMaxMessageSize = size_t{1} << 30;

  size_t maxMessageSize = 4096;  ///< bytes per send and receive buffer: 1 B .. 1 GiB
  uint32_t recvDepth = 16;       ///< receive buffers, all posted while connected
  uint32_t sendDepth = 16;       ///< send queue depth, and send buffers for postSend()
  /// Receive buffers registered beyond recvDepth, of the same size (0 .. 4096; none with a shared
  /// receive queue): a delivered message's buffer can be exchanged for one of them and lent out
  /// while its receive is posted again at once, so a lent buffer never holds back the peer's
  /// credits. Byte streams lend received bytes to the program's input this way
  /// (StreamOptions::lendingBuffers), and Connection::sendReceived sends a received message from
  /// its own buffer so: each spare is one such send in flight. The message API lends none.
  uint32_t spareRecvBuffers = 0;
  /// Signal every Nth send-queue request (0: sendDepth / 4); the last of each post always is.
  uint32_t signalEvery = 0;
  /// Messages up to this many bytes go inline (copied into the work request: no DMA of the
  /// buffer); a framed connection asks for its 16-byte frame header on top. The device may give less.
  uint32_t maxInlineData = 64;
  /// Re-post each receive buffer after onRecv returns. When false the application re-posts with
  /// Connection::postRecv(), which is how it tells the peer's sends to wait.
  bool autoPostRecv = true;
  /// Receive through the shared receive queue of the device and Reactor (one per buffer size)
  /// instead of a receive queue of the connection's own: the buffers come from one pool, which
  /// grows when the device says it runs low, so thousands of mostly idle connections do not each
  /// pin recvDepth buffers. A framed connection (and any connection on iWARP, which has no RNR
  /// retry) is still guaranteed recvDepth buffers; on RoCE an unframed one is guaranteed none, and
  /// a peer that finds the pool empty retries (rnrRetryCount). Each connection takes a seat of
  /// recvDepth on its queue, guaranteed or not, and a queue seats at most its capacity (4 096
  /// receives on RoCE, 512 on iWARP; then another queue): grown, a pool has room for all its
  /// connections' messages at once. Needs autoPostRecv. See Reactor::sharedReceiveStats().
  bool sharedReceiveQueue = false;
  uint8_t retryCount = 7;         ///< transport retries before a send fails (0-7)
  uint8_t rnrRetryCount = 7;      ///< retries when the peer has no receive posted (7 = without end)
  uint8_t responderResources = 1;  ///< RDMA reads the peer may have outstanding against us
  uint8_t initiatorDepth = 1;      ///< RDMA reads we may have outstanding
  /// evrdma's own message protocol; both sides must agree. Every message then carries a 16-byte
  /// frame header, which brings credit-based flow control (a sender never outruns the peer's posted
  /// receives: no RNR retries, and on iWARP, which has none, no broken connection) and memory-region
  /// exchange (requestRegion, sendRegion). Needs recvDepth >= 5. Off: a message is the
  /// application's bytes only, as raw peers (ping-sr, rping) expect.
  bool framed = false;
  /// Framed: how many bytes this side registers at most, in all, for the peer's requestRegion().
  /// 0, the default: this side lends nothing, and every request is refused (-EACCES at the peer):
  /// lending pins memory on the peer's say-so and lets it write there, so only an application that
  /// lends turns it on, sized for its protocol (as blast-server does). A connection that lends has
  /// a protection domain of its own (see ownProtectionDomain): what it lends is out of reach of
  /// every other connection, whatever address and rkey they learn.
  uint64_t maxLentBytes = 0;
  /// Framed: how many regions this side lends at once: past it a request is refused (-ENOSPC at
  /// the peer). Bytes alone do not bound the cost: without a lending pool each region is its own
  /// registration and pins whole pages, so a peer asking for 1-byte regions would otherwise get a
  /// page and a memory region each, up to maxLentBytes of them.
  uint32_t maxLentRegions = 64;
  /// Framed: bytes registered once, when the connection is set up, that the peer's requests are
  /// served from (0, the default: each request is allocated and registered when it arrives, in the
  /// receive path). Pieces are zeroed when given back. One registration covers the pool: a piece's
  /// rkey reaches all of it, for reading and writing (the pool is this one peer's). A request
  /// larger than the pool's largest free range is refused (-ENOMEM at the peer).
  uint64_t lendingPoolBytes = 0;
  /// A protection domain of the connection's own instead of the device's (which every connection
  /// of the Reactor on that device shares): memory registered on it (Connection::protectionDomain(),
  /// the regions it lends or offers with sendRegion) is reachable through this connection's queue
  /// pair alone; a peer that learns an rkey of it cannot use it through another connection. On for
  /// a connection that lends (maxLentBytes > 0). Its buffers are then regions of their own (none
  /// from the device's shared arena: a few pages more per connection), and it cannot use a shared
  /// receive queue. A device with type-2 memory windows could bind each lent region to the
  /// borrower's queue pair instead, but soft-iWARP (siw) has none; a protection domain works on
  /// every device.
  bool ownProtectionDomain = false;
  /// Framed: how many of the peer's regions this side keeps track of at once (granted and sent);
  /// a peer that sends more breaks the protocol, and requestRegion() beyond it gives -ENOSPC.
  uint32_t maxPeerRegions = 1024;
  /// Framed: when the peer has sent nothing for this long, send it a keepalive probe, which the
  /// peer's evrdma answers from its loop (0, the default: never). RDMA has no transport keepalive,
  /// and a peer whose process hangs or is stopped is not noticed otherwise: its device still
  /// acknowledges every packet. Both sides answer probes whatever their own options.
  std::chrono::milliseconds keepaliveInterval{0};
  /// Framed, with keepaliveInterval: a peer that has sent nothing at all (probe answers included)
  /// for this long fails the connection with onError(-ETIMEDOUT, "keepalive: ..."), noticed within
  /// a quarter of it more (0: 3 x keepaliveInterval). At least keepaliveInterval.
  std::chrono::milliseconds keepaliveTimeout{0};
  /// Framed: when messages have waited this long for the peer's credits and none of them went out
  /// meanwhile (the peer takes nothing we send: its application does not read, or it withholds
  /// its receives on purpose), the connection fails with onError(-ETIMEDOUT, "credit timeout:
  /// ..."), noticed within a quarter of it more. 0, the default: wait for ever (a message
  /// connection's application may hold its receives as long as it likes). Byte streams set 60 s
  /// (StreamOptions): as a web server's send timeout, a peer that takes none of what it is owed
  /// for that long costs its server only that long.
  std::chrono::milliseconds creditTimeout{0};
  /// Any connection: no application message either way (sent, received, or a zero-copy operation
  /// completed) for this long fails it with onError(-ETIMEDOUT, "idle timeout: ...") (0, the
  /// default: never). Keepalive probes and credit frames are not messages.
  std::chrono::milliseconds idleTimeout{0};
  /// How long close() waits for the peer's disconnect reply and the flushed work completions
  /// before it releases the resources anyway.
  std::chrono::milliseconds disconnectTimeout{3000};
};

struct ClientOptions : ConnectionOptions {
  std::chrono::milliseconds resolveTimeout{2000};   ///< address, then route resolution, each
  std::chrono::milliseconds connectTimeout{10000};  ///< from rdma_connect to established/rejected
  /// The numeric local address to connect from (its port is chosen), of the destination's family;
  /// empty: whichever the route to the destination gives. A client spreads many connections over
  /// several addresses this way (one address's ports end near 28 000 connections). Not an address
  /// of this host: connect() returns -EADDRNOTAVAIL; not numeric, or of the other family: -EINVAL.
  std::string sourceAddress;
};

struct ConnectionStats {
  uint64_t messagesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t flushedCompletions = 0;  ///< work handed back unexecuted at disconnect
  uint64_t opsCompleted = 0;        ///< send / rdmaWrite / rdmaWriteWithImm / rdmaRead
  uint64_t requestsDropped = 0;     ///< queued behind a full send queue when the connection closed
  uint64_t bytesWritten = 0, bytesRead = 0;
  /// Framed connections.
  uint64_t creditFramesSent = 0;    ///< credit-only frames (credits otherwise ride on messages)
  uint64_t creditWaits = 0;         ///< times a message had to wait for the peer's credits
  uint64_t regionsLent = 0;         ///< regions registered for the peer's requestRegion()
  uint64_t keepaliveProbesSent = 0;   ///< keepaliveInterval: probes sent to a silent peer
  uint64_t keepaliveRepliesSent = 0;  ///< answers to the peer's probes that went out (probes that
                                      ///< came while one waited for credits share it)

  /// Adds another connection's (e.g. for a Listener's totals).
  ConnectionStats& operator+=(const ConnectionStats& other) noexcept {
    messagesSent += other.messagesSent;
    messagesReceived += other.messagesReceived;
    bytesSent += other.bytesSent;
    bytesReceived += other.bytesReceived;
    flushedCompletions += other.flushedCompletions;
    opsCompleted += other.opsCompleted;
    requestsDropped += other.requestsDropped;
    bytesWritten += other.bytesWritten;
    bytesRead += other.bytesRead;
    creditFramesSent += other.creditFramesSent;
    creditWaits += other.creditWaits;
    regionsLent += other.regionsLent;
    keepaliveProbesSent += other.keepaliveProbesSent;
    keepaliveRepliesSent += other.keepaliveRepliesSent;
    return *this;
  }
};

/// Whether a connection with `options` has a protection domain of its own (ownProtectionDomain, or
/// it lends memory).
inline bool usesOwnProtectionDomain(const ConnectionOptions& options) noexcept {
  return options.ownProtectionDomain || options.maxLentBytes > 0;
}

/// 0 if `options` can be used, else -EINVAL with `problem` naming the option at fault.
int checkOptions(const ConnectionOptions& options, const char*& problem) noexcept;

/// What a connection's send queue did (Connection::sendQueueStats).
struct SendQueueStats {
  uint64_t requests = 0;  ///< work requests handed to the device
  uint64_t posts = 0;     ///< ibv_post_send calls (a batch is one)
  uint64_t signaled = 0;  ///< requests that asked for a completion
  size_t inFlight = 0;    ///< posted, not completed yet
  size_t backlog = 0;     ///< waiting for room in the send queue
};

}  // namespace evrdma
