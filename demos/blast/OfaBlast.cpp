// blast-sr-2's roles on the wire (OfaBlast.h): the server's acks and the client's sends, as the OFA
// notes' programs make them.
#include "OfaBlast.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "evrdma/ByteOrder.h"

namespace blast::ofa {

std::vector<uint8_t> encode(const Request& request) {
  std::vector<uint8_t> out(kPrivateDataSize);
  evrdma::putBig64(out.data(), request.limit);
  evrdma::putBig64(out.data() + 8, request.dataSize);
  evrdma::putBig64(out.data() + 16, request.buffers);
  return out;
}

std::string decode(const uint8_t* data, size_t length, const Limits& limits, Request& out) {
  if (data == nullptr || length < kPrivateDataSize)
    return "malformed blast-sr-2 request: " + std::to_string(length) + " bytes of private data, expected " +
           std::to_string(kPrivateDataSize) + " ({limit, data_size, n_data_buffers} as big-endian uint64)";
  Request r;
  r.limit = evrdma::getBig64(data);
  r.dataSize = evrdma::getBig64(data + 8);
  r.buffers = evrdma::getBig64(data + 16);
  if (r.limit == 0 || r.limit > limits.maxLimit)
    return "limit " + std::to_string(r.limit) + " out of range 1.." + std::to_string(limits.maxLimit);
  if (r.dataSize == 0 || r.dataSize > limits.maxDataSize)
    return "data_size " + std::to_string(r.dataSize) + " out of range 1.." + std::to_string(limits.maxDataSize);
  if (r.buffers == 0 || r.buffers > limits.maxBuffers)
    return "n_data_buffers " + std::to_string(r.buffers) + " out of range 1.." + std::to_string(limits.maxBuffers);
  out = r;
  return "";
}

std::string readAck(const uint8_t* data, size_t length, uint64_t unacknowledged, uint64_t& count) {
  // Compared with what is unacknowledged, not added to what was acknowledged: a huge count must
  // not wrap around into an acceptable one.
  const uint64_t value = data != nullptr && length == kAckSize ? evrdma::getBig64(data) : 0;
  if (length != kAckSize || value == 0 || value > unacknowledged)
    return "malformed ack: " + std::to_string(length) + " bytes, count " + std::to_string(value) + " with " +
           std::to_string(unacknowledged) + " messages unacknowledged";
  count = value;
  return "";
}

void AckLedger::onReceived() {
  ++received_, ++unacked_;
  while (!readOnceReceived_.empty() && received_ > readOnceReceived_.front()) readOnceReceived_.pop_front();
}

uint64_t AckLedger::due() const {
  if (readOnceReceived_.size() >= kMaxAcksInFlight || unacked_ == 0) return 0;
  if (allReceived()) return unacked_;  // the final ack: every earlier one has been read by now
  const bool creditsToTheEnd = request_.buffers + acked_ >= request_.limit;
  return unacked_ >= ackThreshold(request_.buffers) && !creditsToTheEnd ? unacked_ : 0;
}

void AckLedger::onAckPosted(uint64_t count) {
  readOnceReceived_.push_back(request_.buffers + acked_);
  unacked_ -= count, acked_ += count, ++sending_;
}

// ---- the receiving side ----

evrdma::ConnectionOptions Agent::options(const Request& request) {
  evrdma::ConnectionOptions o;
  o.maxMessageSize = std::max<size_t>(request.dataSize, kAckSize);
  o.recvDepth = static_cast<uint32_t>(request.buffers);
  o.sendDepth = kMaxAcksInFlight;
  return o;
}

void Agent::onEstablished(evrdma::Connection& c) noexcept {
  connection_ = &c;
  ackTurn_ = std::make_unique<evrdma::Timer>(c.reactor(), [this] {
    if (connection_ != nullptr) ackIfDue(*connection_);
  });
}

void Agent::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  const uint64_t index = ledger_.received();
  if (index == 0) firstMessage = Clock::now();
  if (ledger_.allReceived()) {
    error = "the client sent more than its limit of " + std::to_string(request_.limit) + " messages";
    c.close();
    return;
  }
  if (length != request_.dataSize) {
    error = "message " + std::to_string(index) + " has " + std::to_string(length) + " bytes, data_size is " +
            std::to_string(request_.dataSize);
    c.close();
    return;
  }
  if (verify_)
    for (size_t j = 0; j < length; ++j)
      if (data[j] != patternByte(index, j)) {
        error = "message " + std::to_string(index) + " differs at byte " + std::to_string(j);
        c.close();
        return;
      }
  ledger_.onReceived();
  // Not from here: the receive this message used is posted again only once onRecv returns, and an
  // ack is the client's license to use it.
  if (ledger_.due() > 0 && !ackTurn_->active()) ackTurn_->startOnce(std::chrono::milliseconds(0));
}

void Agent::ackIfDue(evrdma::Connection& c) {
  while (uint64_t count = ledger_.due()) {
    uint8_t ack[kAckSize];
    evrdma::putBig64(ack, count);
    int rc = c.postSend(ack, sizeof ack);
    if (rc == -ENOBUFS) return;  // an ack's send completes first (onSendDone)
    if (rc != 0) {
      error = std::string("postSend (ack): ") + std::strerror(-rc);
      c.close();
      return;
    }
    ledger_.onAckPosted(count);
  }
}

void Agent::onSendDone(evrdma::Connection& c, uint64_t) noexcept {
  ledger_.onAckDone();
  if (complete()) {
    lastAck = Clock::now();
    return;  // the client disconnects
  }
  ackIfDue(c);
}

void Agent::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (error.empty()) error = std::string(op) + ": " + std::strerror(-err);
}

void Agent::onClosed(evrdma::Connection& c) noexcept {
  connection_ = nullptr;
  if (ackTurn_) ackTurn_->cancel();
  if (closedHook) closedHook(*this, c);
}

evrdma::AcceptDecision Factory::onConnectRequest(const evrdma::ConnectRequest& request) noexcept {
  Request r;
  std::string why = decode(request.privateData.data(), request.privateData.size(), limits_, r);
  if (!why.empty()) return evrdma::AcceptDecision::reject(why);
  auto agent = std::make_unique<Agent>(r, verify_);
  agent->closedHook = [this](const Agent& a, const evrdma::Connection& c) {
    ++agentsServed;
    --activeAgents;
    if (!a.error.empty()) ++agentsFailed;
    else if (!a.servedToTheEnd()) ++agentsIncomplete;
    if (agentClosedHook) agentClosedHook(a, c);
  };
  ++activeAgents;
  return evrdma::AcceptDecision::accept(std::move(agent), Agent::options(r));
}

// ---- the sending side ----

evrdma::ClientOptions Client::options(const Request& request) {
  evrdma::ClientOptions o;
  o.maxMessageSize = std::max<size_t>(request.dataSize, kAckSize);
  o.recvDepth = kMaxAcksInFlight;  // as the OFA notes' client: the server must never send a fourth
  o.sendDepth = static_cast<uint32_t>(std::min<uint64_t>(request.buffers, 1024));
  return o;
}

void Client::onEstablished(evrdma::Connection& c) noexcept {
  message_.assign(request_.dataSize, 0);
  result_.started = Clock::now();
  pump(c);
}

void Client::pump(evrdma::Connection& c) {
  while (credits_ > 0 && result_.sent < request_.limit) {
    if (pattern_)
      for (size_t j = 0; j < message_.size(); ++j) message_[j] = patternByte(result_.sent, j);
    int rc = c.postSend(message_.data(), message_.size(), result_.sent);
    if (rc == -ENOBUFS) return;  // every send buffer in flight: onSendDone resumes
    if (rc != 0) {
      result_.error = std::string("postSend: ") + std::strerror(-rc);
      c.close();
      return;
    }
    --credits_;
    ++result_.sent;
  }
}

void Client::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  uint64_t count = 0;
  std::string malformed = readAck(data, length, result_.sent - result_.acked, count);
  if (!malformed.empty()) {
    result_.error = std::move(malformed);
    c.close();
    return;
  }
  credits_ += count;
  result_.acked += count;
  ++result_.acks;
  if (result_.acked == request_.limit) {
    result_.finished = Clock::now();
    result_.succeeded = true;
    c.close();
    return;
  }
  pump(c);
}

void Client::onSendDone(evrdma::Connection& c, uint64_t) noexcept { pump(c); }

void Client::onRejected(evrdma::Connection&, const evrdma::RejectInfo& info) noexcept {
  result_.error = "rejected: " + info.reason;
}

void Client::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (result_.error.empty()) result_.error = std::string(op) + ": " + std::strerror(-err);
}

void Client::onClosed(evrdma::Connection&) noexcept {
  if (result_.finished == Clock::time_point{}) result_.finished = Clock::now();
  if (done_) done_(result_);
}

}  // namespace blast::ofa
