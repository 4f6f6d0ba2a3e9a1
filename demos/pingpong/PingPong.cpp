// The pingpong roles (PingPong.h): the echoing agent and its factory, and the pinging client that
// verifies every byte and times each round trip.
#include "PingPong.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pingpong {
namespace {

void trace(const char* role, const evrdma::Connection& c, const char* what) {
  std::printf("[%s %s] %s\n", role, c.peerAddress().c_str(), what);
  std::fflush(stdout);
}

}  // namespace

std::string describeStatus(int err) { return err < 0 ? std::strerror(-err) : std::to_string(err); }

// ---- EchoAgent ----

void EchoAgent::onEstablished(evrdma::Connection& c) noexcept {
  established = Clock::now();
  if (trace_ != Trace::Off) {
    char line[128];
    std::snprintf(line, sizeof line, "established: count %llu, data_size %llu",
                  static_cast<unsigned long long>(info_.count), static_cast<unsigned long long>(info_.dataSize));
    trace("agent", c, line);
  }
}

void EchoAgent::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  if (trace_ == Trace::Messages) trace("agent", c, ("echo " + std::to_string(echoed_ + 1)).c_str());
  if (echoed_ == 0) {
    firstMessage = Clock::now();
    if (transfer != nullptr) transfer->noteStart();
  }
  ++echoed_;
  int rc = -ENOBUFS;
  if (backlog_.empty()) {  // keep the order: behind what waits
    // From its own buffer; when that is refused (the spare is still on its way out), copied.
    rc = fromReceiveBuffer_ ? c.sendReceived() : -ENOBUFS;
    if (rc == -ENOBUFS) rc = c.postSend(data, length);
  }
  if (rc == -ENOBUFS) {
    if (backlog_.size() >= kMaxEchoBacklog) {
      error = "the client sent " + std::to_string(backlog_.size() + 1) +
              " messages whose echoes it has not taken (ping-sr has one message in flight)";
      if (trace_ != Trace::Off) trace("agent", c, ("closing: " + error).c_str());
      c.close();
      return;
    }
    backlog_.emplace_back(data, data + length);
  } else if (rc != 0) {
    error = "postSend: " + describeStatus(rc);
    c.close();
  }
}

void EchoAgent::onSendDone(evrdma::Connection& c, uint64_t) noexcept {
  if (++echoesSent_ == info_.count) {
    lastEcho = Clock::now();
    if (transfer != nullptr) transfer->noteEnd();
    if (disconnectAfterLast_) {
      c.close();
      return;
    }
  }
  if (backlog_.empty()) return;
  if (int rc = c.postSend(backlog_.front().data(), backlog_.front().size()); rc == 0) {
    backlog_.erase(backlog_.begin());
  } else if (rc != -ENOBUFS) {
    error = "postSend: " + describeStatus(rc);
    c.close();
  }
}

void EchoAgent::onDisconnected(evrdma::Connection& c) noexcept {
  if (trace_ != Trace::Off) {
    // Messages taken and echoes completed differ when an echo was still on its way: say where.
    const evrdma::SendQueueStats queue = c.sendQueueStats();
    trace("agent", c,
          ("disconnected after " + std::to_string(echoed_) + " echoes (" + std::to_string(echoesSent_) +
           " completed, " + std::to_string(queue.inFlight) + " in flight, " + std::to_string(backlog_.size()) +
           " waiting)").c_str());
  }
}

void EchoAgent::onError(evrdma::Connection& c, int err, const char* op) noexcept {
  error = std::string(op) + ": " + describeStatus(err);
  if (trace_ != Trace::Off) trace("agent", c, ("error: " + error).c_str());
}

void EchoAgent::onClosed(evrdma::Connection& c) noexcept {
  closed = Clock::now();
  if (trace_ != Trace::Off) trace("agent", c, "closed");
  if (closedHook) closedHook(*this, c);
}

// ---- EchoFactory ----

evrdma::AcceptDecision EchoFactory::onConnectRequest(const evrdma::ConnectRequest& request) noexcept {
  pingsr::ConnectInfo info;
  std::string why = pingsr::parse(request.privateData.data(), request.privateData.size(), limits_, info);
  if (why.empty() && maxAgents_ != 0 && activeAgents >= maxAgents_)
    why = "server busy: " + std::to_string(activeAgents) + " connections already";
  if (!why.empty()) {
    if (trace_ != Trace::Off) std::printf("[listener] rejected %s: %s\n", request.peerAddress.c_str(), why.c_str());
    return evrdma::AcceptDecision::reject(why);
  }
  const bool fromReceiveBuffer = echoFromReceiveBuffer && !sharedReceiveQueue;
  auto agent = std::make_unique<EchoAgent>(info, trace_, disconnectAfterLastEcho, fromReceiveBuffer);
  agent->transfer = transfer;
  agent->closedHook = [this](const EchoAgent& a, const evrdma::Connection& c) {
    std::lock_guard<std::mutex> lock(closedMutex);
    --activeAgents;
    // Never established, no error: the client gave up before the accept reached it (counted in
    // Listener::stats().abandoned), not a client served.
    const bool abandoned = a.established == Clock::time_point{} && a.error.empty();
    if (abandoned) {
      if (agentClosedHook) agentClosedHook(a, c);
      return;
    }
    ++agentsServed;
    totalEchoes += a.echoed();
    if (!a.error.empty()) {
      if (agentsFailed++ == 0) firstAgentError = a.error;
    } else if (a.echoed() != a.info().count)
      ++agentsIncomplete;
    if (agentClosedHook) agentClosedHook(a, c);
  };
  ++activeAgents;
  evrdma::ConnectionOptions options;
  options.maxMessageSize = info.dataSize;
  options.recvDepth = 2;  // one message in flight, and one more buffer for good measure
  options.sendDepth = 2;
  options.sharedReceiveQueue = sharedReceiveQueue;
  // One message in flight: its echo's send completes before the next message arrives, so one
  // spare is enough (if it is not back yet, that echo is copied).
  options.spareRecvBuffers = fromReceiveBuffer ? 1 : 0;
  useKeepalive(options, keepalive);
  return evrdma::AcceptDecision::accept(std::move(agent), options);
}

void EchoFactory::onListenerError(int err, const char* op) noexcept {
  std::fprintf(stderr, "pingpong-server: listener: %s: %s\n", op, describeStatus(err).c_str());
  if (listenerErrorHook) listenerErrorHook(err);
}

// ---- PingClient ----

void PingClient::onEstablished(evrdma::Connection& c) noexcept {
  result_.established = true;
  result_.establishedAt = Clock::now();
  if (trace_ != Trace::Off) trace("client", c, "established");
  message_.assign(info_.dataSize, 0);
  connection_ = &c;
  if (roundTripTimeout_.count() > 0)
    roundTripTimer_ = std::make_unique<evrdma::Timer>(c.reactor(), [this] { onRoundTripCheck(); });
  if (waitForStart_) {
    waitForStart_();
    if (!startRequested_) {
      waiting_ = true;
      return;
    }
  }
  sendNext(c);
}

void PingClient::start() noexcept {
  if (!result_.established) {
    startRequested_ = true;  // the passive side can be established first: onEstablished starts them
    return;
  }
  if (!waiting_ || connection_ == nullptr) return;
  waiting_ = false;
  sendNext(*connection_);
}

namespace {
constexpr int kChecksPerTimeout = 4;
}

void PingClient::onRoundTripCheck() noexcept {
  if (result_.roundTrips != roundTripsAtCheck_) {
    roundTripsAtCheck_ = result_.roundTrips;
    checksWithoutEcho_ = 0;
  } else if (++checksWithoutEcho_ >= kChecksPerTimeout) {
    onRoundTripTimeout();
  }
}

void PingClient::onRoundTripTimeout() noexcept {
  evrdma::Connection& c = *connection_;
  const evrdma::SendQueueStats queue = c.sendQueueStats();
  result_.error = "round trip " + std::to_string(result_.roundTrips + 1) + ": no echo within " +
                  std::to_string(roundTripTimeout_.count()) + " ms (connection " + evrdma::toString(c.state()) +
                  ", messages sent " + std::to_string(c.stats().messagesSent) + ", received " +
                  std::to_string(c.stats().messagesReceived) + ", sends in flight " + std::to_string(queue.inFlight) +
                  ", receives posted " + std::to_string(c.postedRecvs()) + ")";
  c.close();
}

void PingClient::sendNext(evrdma::Connection& c) noexcept {
  const bool first = result_.roundTrips == 0;
  if (first) {
    if (transfer_ != nullptr) transfer_->noteStart();
    sentAt_ = Clock::now();
    if (roundTripTimer_) {
      roundTripsAtCheck_ = 0;
      checksWithoutEcho_ = 0;
      const auto period = std::max(std::chrono::milliseconds(1), roundTripTimeout_ / kChecksPerTimeout);
      roundTripTimer_->startPeriodic(period);
    }
  }
  if (verify_)
    for (size_t j = 0; j < message_.size(); ++j) message_[j] = patternByte(result_.index, result_.roundTrips, j);
  int rc = c.postSend(message_.data(), message_.size(), result_.roundTrips);
  if (rc == -ENOBUFS) {
    sendPending_ = true;  // onSendDone frees a buffer
    return;
  }
  if (rc != 0) {
    result_.error = "postSend: " + describeStatus(rc);
    c.close();
    return;
  }
  // The clock is read once the message is on its way, while the server works on its echo, not
  // between an echo and the next message (under a guest's HPET a read is a system call of a few
  // microseconds). So the previous round trip is timed from just after its post to just after this
  // one's, as perftest times consecutive posts; the first includes its post and the last (timed on
  // its echo's arrival) does not, and together they add up to the transfer's time.
  if (!first) noteRoundTrip(Clock::now());
}

void PingClient::noteRoundTrip(Clock::time_point now) noexcept {
  const Clock::duration roundTrip = now - sentAt_;
  if (roundTrip > result_.longestRoundTrip) {
    result_.secondLongestRoundTrip = result_.longestRoundTrip;
    result_.longestRoundTrip = roundTrip;
  } else if (roundTrip > result_.secondLongestRoundTrip) {
    result_.secondLongestRoundTrip = roundTrip;
  }
  result_.allRoundTrips += roundTrip;
  if (histogram_ != nullptr) histogram_->record(roundTrip);
  sentAt_ = now;
}

void PingClient::onSendDone(evrdma::Connection& c, uint64_t) noexcept {
  if (!sendPending_) return;
  sendPending_ = false;
  sendNext(c);
}

void PingClient::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  if (length != info_.dataSize) {
    result_.error = "echo " + std::to_string(result_.roundTrips) + " has " + std::to_string(length) + " bytes, sent " +
                    std::to_string(info_.dataSize);
    c.close();
    return;
  }
  if (verify_) {
    for (size_t j = 0; j < length; ++j) {
      if (data[j] != patternByte(result_.index, result_.roundTrips, j)) {
        result_.error = "echo " + std::to_string(result_.roundTrips) + " differs at byte " + std::to_string(j);
        c.close();
        return;
      }
    }
    result_.verifiedBytes += length;
  }
  ++result_.roundTrips;
  if (trace_ == Trace::Messages) trace("client", c, ("round trip " + std::to_string(result_.roundTrips)).c_str());
  if (result_.roundTrips == info_.count) {
    const Clock::time_point now = Clock::now();
    noteRoundTrip(now);
    result_.finishedAt = now;
    if (transfer_ != nullptr) transfer_->noteEnd();
    result_.succeeded = true;
    if (roundTripTimer_) roundTripTimer_->cancel();
    if (holdOpen_) {
      holdOpen_(result_);  // stays connected until closed
      return;
    }
    c.close();
    return;
  }
  sendNext(c);
}

void PingClient::onDisconnected(evrdma::Connection& c) noexcept {
  if (trace_ != Trace::Off) trace("client", c, "disconnected by the server");
  if (result_.roundTrips < info_.count && result_.error.empty())
    result_.error = "server disconnected after " + std::to_string(result_.roundTrips) + " round trips (messages sent " +
                    std::to_string(c.stats().messagesSent) + ", received " + std::to_string(c.stats().messagesReceived) +
                    ")";
}

void PingClient::onRejected(evrdma::Connection& c, const evrdma::RejectInfo& info) noexcept {
  result_.rejected = true;
  result_.error = "rejected: " + info.reason;
  if (trace_ != Trace::Off) trace("client", c, result_.error.c_str());
}

void PingClient::onError(evrdma::Connection& c, int err, const char* op) noexcept {
  result_.error = std::string(op) + ": " + describeStatus(err);
  if (trace_ != Trace::Off) trace("client", c, ("error: " + result_.error).c_str());
}

void PingClient::onClosed(evrdma::Connection& c) noexcept {
  roundTripTimer_.reset();
  connection_ = nullptr;
  if (trace_ != Trace::Off) trace("client", c, "closed");
  if (!result_.succeeded && result_.finishedAt == Clock::time_point{}) result_.finishedAt = Clock::now();
  if (result_.succeeded && !result_.error.empty()) result_.succeeded = false;
  if (done_) done_(result_);
}

}  // namespace pingpong
