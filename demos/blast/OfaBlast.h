// blast-sr-2 on the wire (the OFA notes' second demo), so evrdma's blast talks to the original
// programs: `blast-server -o ofa` and `blast-client -o ofa`, port 12321, unframed.
//   connect private data: {uint64 limit, uint64 data_size, uint64 n_data_buffers}, network byte order
//   the server posts n_data_buffers receives of data_size bytes; the client starts with that many
//   credits and sends `limit` messages of data_size bytes, one credit each;
//   the server acknowledges with 8-byte sends carrying a big-endian uint64: the receives consumed
//   (and posted again) since its previous ack, once that count reaches max(1, n_data_buffers / 3),
//   the rest at the end; at most 3 acks in flight. Each ack gives the client that many credits.
//   Both sides are done when `limit` messages were received and acknowledged.
// The client posts 3 receives for acks and posts each again once it has processed its ack. On
// iWARP an ack's send completion says only that its bytes left, not that the client's receive took
// them (RoCE would retry a receiver-not-ready; iWARP ends the connection), so an ack's receive is
// taken as free again only once the client sent a message that only that ack's credits allowed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ServerFactory.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Connection.h"
#include "evrdma/Watch.h"

namespace blast::ofa {

constexpr uint16_t kDefaultPort = 12321;
constexpr size_t kPrivateDataSize = 24;
constexpr size_t kAckSize = 8;
constexpr uint32_t kMaxAcksInFlight = 3;

struct Request {
  uint64_t limit = 0;       // messages
  uint64_t dataSize = 0;    // bytes each
  uint64_t buffers = 0;     // receives the server posts: the client's credits
};
struct Limits {
  uint64_t maxLimit = 1000000000;
  uint64_t maxDataSize = 16u << 20;
  uint64_t maxBuffers = 1024;
};

std::vector<uint8_t> encode(const Request& request);
// Checks a request as delivered (RoCE pads private data to 56 bytes: only the first 24 count).
// "" if acceptable, else the reason to reject it with.
std::string decode(const uint8_t* data, size_t length, const Limits& limits, Request& out);
// Reads an ack as the client receives it. "" with its `count`, or why it is malformed (not 8
// bytes, a count of 0, or more than the `unacknowledged` messages sent).
std::string readAck(const uint8_t* data, size_t length, uint64_t unacknowledged, uint64_t& count);
inline uint64_t ackThreshold(uint64_t buffers) { return buffers / 3 > 0 ? buffers / 3 : 1; }

// The server's acks, without a device: when one is due and what it says. An ack may be unread
// (its receive at the client not posted again) until the client has sent a message numbered past
// buffers + what was acknowledged before it: only that ack's credits allowed that message.
// Acks that would license nothing the client still sends (it may already send to the end) could
// never be seen read: what they would acknowledge waits for the final ack, which goes once every
// earlier ack has been seen read.
class AckLedger {
 public:
  explicit AckLedger(const Request& request) : request_(request) {}
  void onReceived();
  // The count the next ack carries, or 0 when none is due now (below the threshold and not the
  // end, or 3 acks may be unread, or the client already has credits to the end).
  uint64_t due() const;
  void onAckPosted(uint64_t count);
  void onAckDone() { --sending_; }  // the ack's send completed (its send buffer is free)
  bool allReceived() const { return received_ >= request_.limit; }
  bool allAcked() const { return everyAckPosted() && sending_ == 0; }
  bool everyAckPosted() const { return acked_ >= request_.limit; }
  uint64_t received() const { return received_; }
  // Acks the client may not have read yet.
  uint32_t unread() const { return static_cast<uint32_t>(readOnceReceived_.size()); }

 private:
  Request request_;
  uint64_t received_ = 0, unacked_ = 0, acked_ = 0;
  uint32_t sending_ = 0;
  // For each ack that may be unread, oldest first: the count of messages received past which the
  // client has certainly read it.
  std::deque<uint64_t> readOnceReceived_;
};

// The byte `j` of message `i` when the client patterns its data (-v).
inline uint8_t patternByte(uint64_t i, uint64_t j) { return static_cast<uint8_t>(i * 131 + j * 7 + (j >> 9)); }

using Clock = std::chrono::steady_clock;

// The receiving side: checks the count (and with `verify` every byte), acknowledges as above.
class Agent final : public evrdma::ConnectionHandler {
 public:
  Agent(const Request& request, bool verify) : request_(request), ledger_(request), verify_(verify) {}
  static evrdma::ConnectionOptions options(const Request& request);
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onSendDone(evrdma::Connection& c, uint64_t tag) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

  std::function<void(const Agent&, const evrdma::Connection&)> closedHook;
  const Request& request() const { return request_; }
  uint64_t received() const { return ledger_.received(); }
  bool complete() const { return ledger_.allAcked() && ledger_.allReceived(); }
  // Served to the end: every message received and every ack posted. The client leaves once it
  // has read the final ack, and its disconnect may be read before that ack's send completion
  // (the library tells no send's end once the connection closes): the agent's part was done.
  bool servedToTheEnd() const { return ledger_.allReceived() && ledger_.everyAckPosted(); }
  Clock::time_point firstMessage, lastAck;
  std::string error;

 private:
  void ackIfDue(evrdma::Connection& c);
  Request request_;
  AckLedger ledger_;
  bool verify_;
  std::unique_ptr<evrdma::Timer> ackTurn_;  // acks go out on a later turn: after the receives were posted again
  evrdma::Connection* connection_ = nullptr;
};

class Factory final : public ServerFactory {
 public:
  Factory(const Limits& limits, bool verify) : limits_(limits), verify_(verify) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest& request) noexcept override;
  std::atomic<size_t> activeAgents{0};
  uint64_t agentsServed = 0, agentsFailed = 0, agentsIncomplete = 0;
  std::function<void(const Agent&, const evrdma::Connection&)> agentClosedHook;

 private:
  Limits limits_;
  bool verify_;
};

struct Result {
  uint32_t index = 0;
  uint64_t sent = 0, acked = 0, acks = 0;
  bool succeeded = false;
  std::string error;
  Clock::time_point started, finished;
  double seconds() const { return std::chrono::duration<double>(finished - started).count(); }
};

// The sending side: `limit` messages, one credit each, credits back with each ack.
class Client final : public evrdma::ConnectionHandler {
 public:
  Client(uint32_t index, const Request& request, bool pattern, std::function<void(const Result&)> done)
      : request_(request), pattern_(pattern), credits_(request.buffers), done_(std::move(done)) {
    result_.index = index;
  }
  static evrdma::ClientOptions options(const Request& request);
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onSendDone(evrdma::Connection& c, uint64_t tag) noexcept override;
  void onRejected(evrdma::Connection& c, const evrdma::RejectInfo& info) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

 private:
  void pump(evrdma::Connection& c);
  Request request_;
  bool pattern_;
  uint64_t credits_;
  std::vector<uint8_t> message_;
  Result result_;
  std::function<void(const Result&)> done_;
};

}  // namespace blast::ofa
