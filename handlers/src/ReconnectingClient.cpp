// ReconnectingClient: one attempt after another, the backoff with jitter between them, and giving
// up.
#include "evrdma/ReconnectingClient.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "Logging.h"
#include "evrdma/Reactor.h"

namespace evrdma {

// Shared with the handlers of its connections (weakly), which outlive it when it is dropped from
// inside one of their callbacks.
struct ReconnectingClient::Core : std::enable_shared_from_this<Core> {
  Core(ReconnectingClient& owner, Reactor& on, HandlerFactory makeHandler, const ClientOptions& clientOptions,
       const ReconnectOptions& reconnectOptions)
      : self(&owner),
        reactor(on),
        factory(std::move(makeHandler)),
        options(clientOptions),
        reconnect(reconnectOptions),
        retryTimer(on, [this] { (void)attempt(); }),
        random(std::random_device{}()) {}

  // One connect attempt; what Client::connect returned.
  int attempt() noexcept;
  // The current connection ended (onClosed): `err` is why, `wasUp` whether it was established.
  void ended(int err, bool wasUp) noexcept;
  std::chrono::milliseconds nextDelay() noexcept;

  ReconnectingClient* self;  // null once the owner is gone
  Reactor& reactor;
  HandlerFactory factory;
  ClientOptions options;
  ReconnectOptions reconnect;
  std::string address;
  uint16_t port = 0;
  std::vector<uint8_t> privateData;
  Client::Ptr current;
  Timer retryTimer;
  std::mt19937 random;
  bool started = false;
  bool stopped = false;
  uint32_t attempts = 0, connections = 0, failuresInARow = 0;
};

// Wraps each attempt's handler: forwards every callback, and tells the Core how the connection went.
class ReconnectingClient::Forwarder final : public ConnectionHandler {
 public:
  Forwarder(std::weak_ptr<Core> core, std::unique_ptr<ConnectionHandler> inner)
      : core_(std::move(core)), inner_(inner ? std::move(inner) : std::make_unique<ConnectionHandler>()) {}
  void onEstablished(Connection& c) noexcept override {
    up_ = true;
    if (auto core = core_.lock()) {
      ++core->connections;
      core->failuresInARow = 0;
    }
    inner_->onEstablished(c);
  }
  void onRecv(Connection& c, const uint8_t* data, size_t length) noexcept override { inner_->onRecv(c, data, length); }
  void onRecvWithImm(Connection& c, uint32_t imm, const uint8_t* data, size_t length) noexcept override {
    inner_->onRecvWithImm(c, imm, data, length);
  }
  void onSendDone(Connection& c, uint64_t tag) noexcept override { inner_->onSendDone(c, tag); }
  void onOpDone(Connection& c, const OpCompletion& done) noexcept override { inner_->onOpDone(c, done); }
  void onWritable(Connection& c) noexcept override { inner_->onWritable(c); }
  void onRegionGranted(Connection& c, uint64_t tag, const RemoteRegion& region) noexcept override {
    inner_->onRegionGranted(c, tag, region);
  }
  void onRegionRefused(Connection& c, uint64_t tag, int err) noexcept override { inner_->onRegionRefused(c, tag, err); }
  void onRegionReceived(Connection& c, const RemoteRegion& region, uint64_t tag) noexcept override {
    inner_->onRegionReceived(c, region, tag);
  }
  void onRegionLent(Connection& c, const MemoryRegion& region) noexcept override { inner_->onRegionLent(c, region); }
  void onDisconnected(Connection& c) noexcept override { inner_->onDisconnected(c); }
  void onRejected(Connection& c, const RejectInfo& info) noexcept override {
    error_ = -ECONNREFUSED;
    inner_->onRejected(c, info);
  }
  void onError(Connection& c, int err, const char* op) noexcept override {
    if (error_ == 0) error_ = err;
    inner_->onError(c, err, op);
  }
  void onClosed(Connection& c) noexcept override {
    inner_->onClosed(c);
    if (auto core = core_.lock()) core->ended(error_, up_);
  }

 private:
  std::weak_ptr<Core> core_;
  std::unique_ptr<ConnectionHandler> inner_;
  bool up_ = false;
  int error_ = 0;
};

ReconnectingClient::ReconnectingClient(Reactor& reactor, HandlerFactory factory, const ClientOptions& options,
                                       const ReconnectOptions& reconnect)
    : core_(std::make_shared<Core>(*this, reactor, std::move(factory), options, reconnect)) {}

ReconnectingClient::~ReconnectingClient() {
  stop();
  core_->self = nullptr;
}

int ReconnectingClient::start(const std::string& address, uint16_t port, std::vector<uint8_t> privateData) noexcept {
  if (core_->started) return -EALREADY;
  core_->address = address;
  core_->port = port;
  core_->privateData = std::move(privateData);
  core_->started = true;
  core_->stopped = false;
  const int rc = core_->attempt();
  if (rc == -EINVAL || rc == -EMSGSIZE) {  // what no retry would fix is refused now
    core_->started = false;
    core_->attempts = 0;
    core_->failuresInARow = 0;
    return rc;
  }
  return 0;
}

void ReconnectingClient::stop() noexcept {
  core_->stopped = true;
  core_->retryTimer.cancel();
  core_->current.reset();  // closes it; freed after its onClosed
}

Client* ReconnectingClient::client() const noexcept { return core_->current.get(); }
bool ReconnectingClient::stopped() const noexcept { return core_->stopped; }
uint32_t ReconnectingClient::attempts() const noexcept { return core_->attempts; }
uint32_t ReconnectingClient::connections() const noexcept { return core_->connections; }
uint32_t ReconnectingClient::failuresInARow() const noexcept { return core_->failuresInARow; }

int ReconnectingClient::Core::attempt() noexcept {
  if (stopped) return 0;
  ++attempts;
  auto handler = std::make_unique<Forwarder>(weak_from_this(), factory ? factory() : nullptr);
  Client::Ptr client = Client::create(reactor, std::move(handler), options);
  const int rc = client->connect(address, port, privateData);
  if (rc == 0) {
    current = std::move(client);
    return 0;
  }
  // Refused at once: no callback comes for it.
  EVRDMA_LOG(LogLevel::Info, "reconnecting client of %s:%u: connect: %s", address.c_str(), port, strerror(-rc));
  if (rc == -EINVAL || rc == -EMSGSIZE) {  // the input is wrong: no retry would help
    stopped = true;
    return rc;
  }
  ended(rc, false);
  return rc;
}

void ReconnectingClient::Core::ended(int err, bool wasUp) noexcept {
  // The Client is freed after its onClosed returns (its Ptr's deleter defers it).
  current.reset();
  if (stopped) return;
  if (!wasUp) ++failuresInARow;
  if (reconnect.maxAttempts != 0 && failuresInARow >= reconnect.maxAttempts) {
    stopped = true;
    EVRDMA_LOG(LogLevel::Warn, "reconnecting client of %s:%u: gave up after %u failed attempts in a row",
               address.c_str(), port, failuresInARow);
    if (self != nullptr && self->onGiveUp) self->onGiveUp(err);
    return;
  }
  const std::chrono::milliseconds delay = nextDelay();
  if (self != nullptr && self->onRetry) self->onRetry(err, delay);
  if (!stopped) retryTimer.startOnce(delay);  // onRetry may have stopped it
}

std::chrono::milliseconds ReconnectingClient::Core::nextDelay() noexcept {
  double delay = static_cast<double>(reconnect.initialDelay.count());
  for (uint32_t i = 1; i < failuresInARow && delay < static_cast<double>(reconnect.maxDelay.count()); ++i)
    delay *= std::max(1.0, reconnect.multiplier);
  delay = std::min(delay, static_cast<double>(reconnect.maxDelay.count()));
  const double jitter = std::clamp(reconnect.jitter, 0.0, 1.0);
  std::uniform_real_distribution<double> spread(1.0 - jitter, 1.0);
  return std::chrono::milliseconds(static_cast<long>(delay * spread(random)));
}

}  // namespace evrdma
