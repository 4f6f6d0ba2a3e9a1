// The pingpong roles on evrdma, shared by the demo programs and the tests: an echoing agent (with
// its factory, which validates the ping-sr request) and a pinging client that can verify every byte.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "Figures.h"
#include "LatencyHistogram.h"
#include "PingSr.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Connection.h"
#include "evrdma/Watch.h"

namespace pingpong {

using Clock = std::chrono::steady_clock;

enum class Trace { Off, Connections, Messages };  // -t, -T

// The content of byte `offset` of message `message` of client `client`: verification catches lost,
// repeated, reordered or mixed-up messages, not only flipped bits.
inline uint8_t patternByte(uint32_t client, uint64_t message, size_t offset) {
  return static_cast<uint8_t>(client * 131u + message * 31u + offset * 7u + (offset >> 8));
}

// -K MS (both programs, and both sides must say it): framed connections (evrdma's frames around
// the ping-sr messages, so no longer raw ping-sr) with keepalive: a side silent for MS ms is
// probed, and closed after 3 x MS. Framed needs five receives (three for evrdma's own frames).
inline void useKeepalive(evrdma::ConnectionOptions& options, std::chrono::milliseconds interval) {
  if (interval.count() == 0) return;
  options.framed = true;
  options.keepaliveInterval = interval;
  options.recvDepth = std::max(options.recvDepth, evrdma::ConnectionOptions::kMinFramedRecvDepth);
  options.sendDepth = std::max<uint32_t>(options.sendDepth, 4);  // an echo, a probe's answer, credits
}

// Echoes every message back. It does not close: the client does, after its last echo; unless
// `disconnectAfterLast`, when it disconnects as soon as its last echo has been sent (as the OFA
// notes' agent does), racing the client's reading of that echo.
class EchoAgent : public evrdma::ConnectionHandler {
 public:
  // ping-sr has one message in flight; an echo may wait for a send buffer behind one or two whose
  // completion has not come back yet. A client with more waiting breaks the protocol (and would
  // grow the server's memory without bound): it is closed, saying so.
  static constexpr size_t kMaxEchoBacklog = 4;
  // `fromReceiveBuffer`: each echo is sent from the buffer its message arrived in
  // (Connection::sendReceived, with a spare receive buffer), else copied (postSend).
  EchoAgent(pingsr::ConnectInfo info, Trace trace, bool disconnectAfterLast = false, bool fromReceiveBuffer = false)
      : info_(info), trace_(trace), disconnectAfterLast_(disconnectAfterLast), fromReceiveBuffer_(fromReceiveBuffer) {}
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onSendDone(evrdma::Connection& c, uint64_t tag) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

  uint64_t echoed() const { return echoed_; }
  size_t echoesWaiting() const { return backlog_.size(); }  // refused by a full send queue, to go later
  std::function<void(const EchoAgent&, const evrdma::Connection&)> closedHook;  // figures, counting

  const pingsr::ConnectInfo& info() const { return info_; }
  // Told of the first message and the last echo (the process's CPU over its transfers).
  TransferMeter* transfer = nullptr;
  Clock::time_point established, closed;
  Clock::time_point firstMessage, lastEcho;  // the transfer alone: from the first message to the last echo sent
  std::string error;

 private:
  pingsr::ConnectInfo info_;
  Trace trace_;
  bool disconnectAfterLast_;
  bool fromReceiveBuffer_;
  uint64_t echoed_ = 0;
  uint64_t echoesSent_ = 0;
  std::vector<std::vector<uint8_t>> backlog_;  // echoes waiting for a free send buffer
};

// Validates each ping-sr request and makes an EchoAgent for it.
class EchoFactory : public evrdma::AgentFactory {
 public:
  EchoFactory(pingsr::Limits limits, Trace trace, size_t maxAgents) : limits_(limits), trace_(trace), maxAgents_(maxAgents) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest& request) noexcept override;
  void onListenerError(int err, const char* op) noexcept override;

  // Atomic: with ListenerOptions::workers the agents close on the workers' threads (and their
  // closed hooks run one at a time, under closedMutex).
  std::atomic<size_t> activeAgents{0};
  std::atomic<uint64_t> agentsServed{0};
  std::atomic<uint64_t> agentsFailed{0};      // ended with an error
  std::atomic<uint64_t> agentsIncomplete{0};  // no error, but disconnected before `count` echoes
  std::atomic<uint64_t> totalEchoes{0};  // rejections: Listener::stats()
  std::mutex closedMutex;
  std::string firstAgentError;  // what the first failed agent heard (under closedMutex)
  bool disconnectAfterLastEcho = false;  // see EchoAgent
  bool sharedReceiveQueue = false;       // agents receive through the device's SRQ
  std::chrono::milliseconds keepalive{0};  // -K: framed, with keepalive (see useKeepalive)
  // Echoes go from the buffer their message arrived in (Connection::sendReceived: one spare
  // receive buffer more per agent, no copy), except through a shared receive queue; false: copied.
  bool echoFromReceiveBuffer = true;
  std::function<void(const EchoAgent&, const evrdma::Connection&)> agentClosedHook;
  std::function<void(int err)> listenerErrorHook;  // the listener stopped (e.g. -ENODEV)
  TransferMeter* transfer = nullptr;  // handed to every agent

 private:
  pingsr::Limits limits_;
  Trace trace_;
  size_t maxAgents_;
};

struct PingResult {
  uint32_t index = 0;
  uint64_t roundTrips = 0;
  uint64_t verifiedBytes = 0;
  bool established = false, succeeded = false, rejected = false;
  std::string error;  // rejection reason or failure
  Clock::time_point connectStarted, establishedAt, finishedAt;
  Clock::duration longestRoundTrip{};  // from one send to the next, its echo in between (see sendNext)
  Clock::duration secondLongestRoundTrip{};
  Clock::duration allRoundTrips{};  // their sum
  double seconds() const { return std::chrono::duration<double>(finishedAt - establishedAt).count(); }
};

// Sends `count` messages of `size` bytes one at a time, each after the previous echo came back.
class PingClient : public evrdma::ConnectionHandler {
 public:
  PingClient(uint32_t index, pingsr::ConnectInfo info, bool verify, Trace trace,
             std::function<void(const PingResult&)> done)
      : info_(info), verify_(verify), trace_(trace), done_(std::move(done)) {
    result_.index = index;
    result_.connectStarted = Clock::now();
  }
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onSendDone(evrdma::Connection& c, uint64_t tag) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onRejected(evrdma::Connection& c, const evrdma::RejectInfo& info) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;
  const PingResult& result() const { return result_; }
  // A round trip whose echo has not come back within `timeout` ends the connection with an error
  // saying so (a lost message is never waited for silently), within 1.25 x `timeout`: a periodic
  // check looks for progress, so a round trip costs no timer. 0: no limit.
  void setRoundTripTimeout(std::chrono::milliseconds timeout) { roundTripTimeout_ = timeout; }
  // Once established, the round trips wait for start(); `established` is told.
  void waitForStart(std::function<void()> established) { waitForStart_ = std::move(established); }
  // Starts the round trips; called before the connection is established, they start once it is.
  void start() noexcept;
  // After its last round trip the connection stays open (until closed) and `completed` is told.
  void holdOpen(std::function<void(const PingResult&)> completed) { holdOpen_ = std::move(completed); }
  // Told when the round trips start and when the last one is back.
  void setTransferMeter(TransferMeter* meter) { transfer_ = meter; }
  // Each round trip's time goes into `histogram` too (several clients may share one).
  void setLatencyHistogram(LatencyHistogram* histogram) { histogram_ = histogram; }

 private:
  void sendNext(evrdma::Connection& c) noexcept;
  void noteRoundTrip(Clock::time_point now) noexcept;  // the round trip just completed ends at `now`
  void onRoundTripCheck() noexcept;  // every quarter of the timeout while round trips run
  void onRoundTripTimeout() noexcept;
  pingsr::ConnectInfo info_;
  bool verify_;
  Trace trace_;
  std::function<void(const PingResult&)> done_;
  PingResult result_;
  std::vector<uint8_t> message_;
  bool sendPending_ = false;  // the next message waits for a free send buffer
  Clock::time_point sentAt_;  // the current round trip's start (see sendNext)
  std::chrono::milliseconds roundTripTimeout_{0};
  evrdma::Connection* connection_ = nullptr;  // while established, for the timer
  std::unique_ptr<evrdma::Timer> roundTripTimer_;  // periodic: see onRoundTripCheck
  uint64_t roundTripsAtCheck_ = 0;
  int checksWithoutEcho_ = 0;
  std::function<void(const PingResult&)> holdOpen_;
  std::function<void()> waitForStart_;
  bool waiting_ = false;  // established, round trips not started
  bool startRequested_ = false;  // start() came before the connection was established
  TransferMeter* transfer_ = nullptr;
  LatencyHistogram* histogram_ = nullptr;
};

// "12.3 us" style helpers for figures.
std::string describeStatus(int err);

}  // namespace pingpong
