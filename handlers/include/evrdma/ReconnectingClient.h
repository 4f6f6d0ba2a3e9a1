/// \file
/// ReconnectingClient: a Client that connects again when its connection fails or ends, after a
/// delay that grows with each failed attempt (exponential backoff, with a cap and some jitter, so a
/// crowd of clients of a restarted server does not come back all at once). Each attempt is a new
/// Client with a new handler from the application's factory; the handler hears that connection's
/// callbacks as usual. It ends only when stop() is called or it gives up (maxAttempts).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Client.h"
#include "evrdma/Watch.h"

namespace evrdma {

struct ReconnectOptions {
  std::chrono::milliseconds initialDelay{100};  ///< before the first retry, and after a connection that was up
  std::chrono::milliseconds maxDelay{10000};    ///< the cap of the growing delay
  double multiplier = 2.0;                      ///< the delay grows by this after each failed attempt
  double jitter = 0.2;                          ///< each delay is drawn from [d x (1 - jitter), d]
  uint32_t maxAttempts = 0;                     ///< failed attempts in a row before giving up (0: never)
};

class ReconnectingClient {
 public:
  using HandlerFactory = std::function<std::unique_ptr<ConnectionHandler>()>;

  /// Nothing starts before start(). `factory` makes each attempt's handler (it may return null for
  /// one that ignores everything).
  ReconnectingClient(Reactor& reactor, HandlerFactory factory, const ClientOptions& options = {},
                     const ReconnectOptions& reconnect = {});
  /// Stops (see stop()). Safe from inside the current connection's callbacks.
  ~ReconnectingClient();
  ReconnectingClient(const ReconnectingClient&) = delete;
  ReconnectingClient& operator=(const ReconnectingClient&) = delete;

  /// Connects to `address`:`port` (numeric), and again whenever a connection fails or ends. 0, or
  /// what Client::connect returns at once for input that no retry would fix (-EINVAL, -EMSGSIZE):
  /// nothing is attempted then. -EALREADY once started.
  int start(const std::string& address, uint16_t port, std::vector<uint8_t> privateData = {}) noexcept;
  /// No more attempts; closes the current connection (its handler hears onClosed as usual).
  /// Safe from anywhere, including the connection's own callbacks. Closing the Client itself
  /// (client()->close()) only ends that connection: the next attempt follows.
  void stop() noexcept;

  /// The current connection, or null between attempts (and after stop()).
  Client* client() const noexcept;
  bool stopped() const noexcept;
  uint32_t attempts() const noexcept;     ///< connect attempts made
  uint32_t connections() const noexcept;  ///< attempts that became established
  uint32_t failuresInARow() const noexcept;

  /// Before each wait: the error the last attempt ended with (-ECONNREFUSED when rejected; 0 when
  /// the connection was up and ended cleanly) and how long until the next.
  std::function<void(int err, std::chrono::milliseconds delay)> onRetry;
  /// maxAttempts failed in a row: no more attempts. `err` is the last one's error.
  std::function<void(int err)> onGiveUp;

 private:
  struct Core;
  class Forwarder;
  std::shared_ptr<Core> core_;
};

}  // namespace evrdma
