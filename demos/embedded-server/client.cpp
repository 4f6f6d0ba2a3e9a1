// echo-client: a client of embedded-server's echo service. Sends MESSAGES framed messages (a
// window of them in flight, or one every INTERVAL ms) on each of CONNECTIONS connections, checks
// every byte of every echo, and prints what it did as one JSON line. With -r it survives a server restart: it reconnects with
// exponential backoff (evrdma::ReconnectingClient) and sends again what was not echoed.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "CommandLine.h"
#include "EchoProtocol.h"
#include "Json.h"
#include "evrdma/Client.h"
#include "evrdma/Log.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReconnectingClient.h"
#include "evrdma/Watch.h"

namespace {

const char* const kUsage =
    "usage: echo-client -a ADDRESS [-p PORT] [-n MESSAGES] [-c CONNECTIONS] [-s SIZE] [-w WINDOW]\n"
    "                   [-d DEPTH] [-i INTERVAL_MS] [-k KEEPALIVE_MS] [-r] [-v]\n"
    "  -a ADDRESS    the server's numeric address (embedded-server)\n"
    "  -p PORT       its RDMA port (default 7475)\n"
    "  -n MESSAGES   messages to have echoed and checked, per connection (default 1000; 0: until\n"
    "                SIGINT)\n"
    "  -c CONNECTIONS  connections at once from this one thread, 1 .. 1024 (default 1; not with -r)\n"
    "  -b            begin together: no connection sends before all are established (their setup,\n"
    "                buffers registered on both sides, then stays out of the waits measured)\n"
    "  -s SIZE       bytes per message, 8 .. 65536 (default 64)\n"
    "  -w WINDOW     messages in flight at once, 1 .. DEPTH (default 4)\n"
    "  -d DEPTH      receives and sends posted, 5 .. 64 (default 8; the server's -d must be as large)\n"
    "  -i INTERVAL   send one message every INTERVAL ms (pacing; window 1) instead of a window\n"
    "  -k MS         keepalive: probe a silent server after MS ms, give up after 3 x MS\n"
    "  -r            reconnect when the connection fails or ends (backoff 100 ms doubling to 2 s),\n"
    "                and send again what was not echoed\n"
    "  -v            report the library's log (info and above) on stderr\n"
    "Prints one JSON line, summed over the connections: messages, verified, mismatches, sent,\n"
    "bytes_sent, bytes_received, connections (made, reconnections included), attempts,\n"
    "mean_ms and longest_ms (what a message waited for its echo, from its postSend), over_100ms\n"
    "(echoes that waited longer than 100 ms), last_error. Exit 0 when every message of every\n"
    "connection came back intact.\n";

struct Run {
  uint64_t total = 1000;
  size_t size = 64;
  uint32_t window = 4;
  uint32_t depth = 8;
  std::chrono::milliseconds interval{0};
  uint64_t verified = 0, mismatches = 0, nextSeq = 0;
  uint64_t sent = 0, bytesSent = 0, bytesReceived = 0, connections = 0;
  std::chrono::steady_clock::duration longest{0};
  uint64_t over100ms = 0;
  std::chrono::steady_clock::duration waited{0};  // summed over the echoes: their mean
  std::string lastError;
  bool done() const { return total != 0 && verified >= total; }
  // Another connection's counts, for the JSON line's sums.
  void add(const Run& other) {
    total += other.total;
    verified += other.verified;
    mismatches += other.mismatches;
    sent += other.sent;
    bytesSent += other.bytesSent;
    bytesReceived += other.bytesReceived;
    connections += other.connections;
    over100ms += other.over100ms;
    waited += other.waited;
    longest = std::max(longest, other.longest);
    if (!other.lastError.empty()) lastError = other.lastError;
  }
};

// -b: connections wait here until the last one is established, then all begin. A connection that
// ends before it is established (refused, rejected, timed out) leaves the line: the others must
// not wait for it for ever.
struct StartLine {
  size_t expected = 0, established = 0;
  std::vector<std::function<void()>> waiting;
  void arrive(std::function<void()> begin) {
    waiting.push_back(std::move(begin));
    ++established;
    startIfAllIn();
  }
  void leave() {
    --expected;
    startIfAllIn();
  }

 private:
  void startIfAllIn() {
    if (established < expected || waiting.empty()) return;
    auto go = std::move(waiting);
    waiting.clear();
    for (auto& begin : go) begin();
  }
};

class EchoClient final : public evrdma::ConnectionHandler {
 public:
  EchoClient(Run& run, evrdma::Reactor& reactor, std::function<void()> finished)
      : run_(run), message_(run.size), pacer_(reactor, [this] { pace(); }), finished_(std::move(finished)) {}

  void onEstablished(evrdma::Connection& c) noexcept override {
    connection_ = &c;
    ++run_.connections;
    run_.nextSeq = run_.verified;  // what the previous connection did not get back goes again
    if (startLine != nullptr) {
      arrived_ = true;
      startLine->arrive([this] { begin(); });
    }
    else
      begin();
  }
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    if (inFlight_.empty() || length != run_.size || !echo::check(data, length, inFlight_.front().seq)) {
      ++run_.mismatches;
      run_.lastError = "an echo that is not the message sent";
      c.close();
      return;
    }
    const auto waited = std::chrono::steady_clock::now() - inFlight_.front().sent;
    run_.longest = std::max(run_.longest, waited);
    run_.waited += waited;
    if (waited > std::chrono::milliseconds(100)) ++run_.over100ms;
    inFlight_.pop_front();
    ++run_.verified;
    if (run_.done()) {
      finished_();
      return;
    }
    if (run_.interval.count() == 0) fillWindow();
  }
  void onError(evrdma::Connection&, int err, const char* op) noexcept override {
    run_.lastError = std::string(op) + ": " + std::strerror(-err);
  }
  void onRejected(evrdma::Connection&, const evrdma::RejectInfo& info) noexcept override {
    run_.lastError = "rejected: " + info.reason;
  }
  void onClosed(evrdma::Connection& c) noexcept override {
    pacer_.cancel();
    if (startLine != nullptr && !arrived_) startLine->leave();
    connection_ = nullptr;
    run_.sent += c.stats().messagesSent;
    run_.bytesSent += c.stats().bytesSent;
    run_.bytesReceived += c.stats().bytesReceived;
    if (closedHook) closedHook();
  }
  std::function<void()> closedHook;
  StartLine* startLine = nullptr;

 private:
  void begin() {
    if (run_.interval.count() > 0)
      pacer_.startPeriodic(run_.interval);
    else
      fillWindow();
  }
  void pace() {
    if (inFlight_.empty()) sendNext();
  }
  void fillWindow() {
    while (inFlight_.size() < run_.window && sendNext()) {
    }
  }
  bool sendNext() {
    if (connection_ == nullptr || (run_.total != 0 && run_.nextSeq >= run_.total)) return false;
    echo::fill(message_.data(), message_.size(), run_.nextSeq);
    if (connection_->postSend(message_.data(), message_.size()) != 0) return false;
    inFlight_.push_back(InFlight{run_.nextSeq++, std::chrono::steady_clock::now()});
    return true;
  }

  Run& run_;
  std::vector<uint8_t> message_;
  struct InFlight {
    uint64_t seq;
    std::chrono::steady_clock::time_point sent;
  };
  std::deque<InFlight> inFlight_;
  evrdma::Connection* connection_ = nullptr;
  bool arrived_ = false;  // at the start line (-b)
  evrdma::Timer pacer_;
  std::function<void()> finished_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  unsigned long long port = echo::kDefaultPort, value = 0, keepaliveMs = 0;
  bool reconnect = false, verbose = false, together = false;
  unsigned long long connections = 1;
  Run run;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:n:c:bs:w:d:i:k:rvh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port) && port > 0; break;
      case 'n': ok = pingpong::parseNumber(optarg, UINT64_MAX, value); run.total = value; break;
      case 'c': ok = pingpong::parseNumber(optarg, 1024, connections) && connections >= 1; break;
      case 's':
        ok = pingpong::parseNumber(optarg, echo::kMaxMessage, value) && value >= echo::kMinMessage;
        run.size = value;
        break;
      case 'w': ok = pingpong::parseNumber(optarg, 64, value) && value >= 1; run.window = static_cast<uint32_t>(value); break;
      case 'd': ok = pingpong::parseNumber(optarg, 64, value) && value >= 5; run.depth = static_cast<uint32_t>(value); break;
      case 'i':
        ok = pingpong::parseNumber(optarg, 3600000, value) && value >= 1;
        run.interval = std::chrono::milliseconds(value);
        run.window = 1;
        break;
      case 'k': ok = pingpong::parseNumber(optarg, 3600000, keepaliveMs) && keepaliveMs >= 1; break;
      case 'r': reconnect = true; break;
      case 'b': together = true; break;
      case 'v': verbose = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
    if (!pingpong::optionsAreGood("echo-client", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("echo-client", optind, argc, argv)) return 2;
  if (address == nullptr) {
    std::fprintf(stderr, "echo-client: -a ADDRESS is required\n%s", kUsage);
    return 2;
  }
  if (run.window > run.depth) {
    std::fprintf(stderr, "echo-client: -w %u is more than -d %u\n", run.window, run.depth);
    return 2;
  }
  if (reconnect && connections > 1) {
    std::fprintf(stderr, "echo-client: -r takes one connection (-c 1)\n");
    return 2;
  }
  if (verbose) evrdma::setLogCallback(evrdma::LogLevel::Info, evrdma::logToStderr);

  evrdma::Reactor reactor;
  if (!reactor.valid()) return 1;
  evrdma::ClientOptions options;
  options.framed = true;
  options.maxMessageSize = echo::kMaxMessage;
  options.recvDepth = run.depth;
  options.sendDepth = run.depth;
  options.keepaliveInterval = std::chrono::milliseconds(keepaliveMs);
  options.resolveTimeout = std::chrono::milliseconds(2000);
  options.connectTimeout = std::chrono::milliseconds(3000);

  bool stopping = false;
  std::unique_ptr<evrdma::ReconnectingClient> reconnecting;
  std::vector<Run> runs(connections, run);  // one per connection, never moved: handlers keep a reference
  std::vector<evrdma::Client::Ptr> clients(connections);
  size_t closed = 0;
  StartLine startLine;
  startLine.expected = connections;
  auto stop = [&] {
    if (stopping) return;
    stopping = true;
    if (reconnecting) {
      if (reconnecting->client() == nullptr) reactor.stop();  // between attempts: nothing to close
      reconnecting->stop();
    } else {
      for (auto& client : clients)
        if (client) client->close();
    }
  };
  auto makeHandler = [&](size_t k) {
    // One connection done closes it; the run ends when all have closed (or SIGINT closes them).
    auto finished = [&, k] {
      if (reconnecting) stop();
      else if (clients[k]) clients[k]->close();
    };
    auto handler = std::make_unique<EchoClient>(runs[k], reactor, finished);
    if (together && !reconnecting) handler->startLine = &startLine;
    handler->closedHook = [&] {
      if (reconnecting ? stopping : ++closed == clients.size()) reactor.stop();
    };
    return handler;
  };
  evrdma::SignalWatch onInt(reactor, SIGINT, [&](int) { stop(); });
  evrdma::SignalWatch onTerm(reactor, SIGTERM, [&](int) { stop(); });

  std::vector<uint8_t> none;
  int rc = 0;
  if (reconnect) {
    evrdma::ReconnectOptions backoff;
    backoff.initialDelay = std::chrono::milliseconds(100);
    backoff.maxDelay = std::chrono::milliseconds(2000);
    reconnecting = std::make_unique<evrdma::ReconnectingClient>(reactor, [&] { return makeHandler(0); }, options, backoff);
    reconnecting->onGiveUp = [&](int) { reactor.stop(); };
    reconnecting->onRetry = [&](int err, std::chrono::milliseconds delay) {
      std::fprintf(stderr, "echo-client: connection ended (%s); next attempt in %lld ms\n",
                   err != 0 ? std::strerror(-err) : "closed", static_cast<long long>(delay.count()));
    };
    rc = reconnecting->start(address, static_cast<uint16_t>(port));
  } else {
    for (size_t k = 0; k < clients.size() && rc == 0; ++k) {
      clients[k] = evrdma::Client::create(reactor, makeHandler(k), options);
      rc = clients[k]->connect(address, static_cast<uint16_t>(port));
      if (rc != 0) clients[k].reset();  // a failed connect never calls back
    }
  }
  if (rc != 0) {
    std::fprintf(stderr, "echo-client: connect: %s%s\n", std::strerror(-rc), pingpong::setupErrorHint(rc));
    return 1;
  }
  reactor.run();
  const uint32_t attempts = reconnecting ? reconnecting->attempts() : static_cast<uint32_t>(clients.size());
  reconnecting.reset();
  clients.clear();
  Run all;
  all.total = 0;
  bool allDone = true;
  for (const Run& one : runs) {
    all.add(one);
    allDone = allDone && one.done();
  }
  run = all;
  std::printf(
      "{\"messages\": %" PRIu64 ", \"verified\": %" PRIu64 ", \"mismatches\": %" PRIu64 ", \"sent\": %" PRIu64
      ", \"bytes_sent\": %" PRIu64 ", \"bytes_received\": %" PRIu64 ", \"connections\": %" PRIu64
      ", \"attempts\": %u, \"mean_ms\": %.3f, \"longest_ms\": %.3f, \"over_100ms\": %" PRIu64 ", \"last_error\": %s}\n",
      run.total, run.verified, run.mismatches, run.sent, run.bytesSent, run.bytesReceived, run.connections, attempts,
      run.verified > 0 ? std::chrono::duration<double, std::milli>(run.waited).count() / static_cast<double>(run.verified) : 0.0,
      std::chrono::duration<double, std::milli>(run.longest).count(), run.over100ms,
      echo::jsonString(run.lastError).c_str());
  return allDone && run.mismatches == 0 ? 0 : 1;
}
