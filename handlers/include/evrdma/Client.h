/// \file
/// Client: the active side of one connection. It resolves the address and the route, connects with
/// the application's private data, and then moves data like any Connection.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evrdma/Connection.h"

namespace evrdma {

class ClientCore;

class Client : public Connection {
 public:
  /// Dropping a Ptr closes the client (if it is not closed yet) and frees it after onClosed; safe
  /// from inside its own callbacks.
  struct Release {
    void operator()(Client* client) const noexcept;
  };
  using Ptr = std::unique_ptr<Client, Release>;

  static Ptr create(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ClientOptions& options = {});

  /// Starts connecting to a numeric IPv4/IPv6 `address` and `port`, carrying `privateData` in the
  /// request. connectTimeout counts from rdma_connect to the answer's arrival: an answer that
  /// arrived in time but waits in this reactor's own CM event queue behind a burst of other events
  /// is not a timeout (the verdict waits until that queue has drained), nor is a wait for the
  /// Reactor's connect limit (Reactor::setMaxConnectsInFlight). Returns 0: the outcome arrives as
  /// onEstablished, onRejected or onError, then onClosed.
  /// Or returns -errno at once, and no callback fires: -EINVAL (not a numeric address), -EMSGSIZE
  /// (private data longer than any transport carries), -EINVAL (unusable options, see
  /// Connection::checkOptions), -EALREADY (not Idle), -ENODEV (no RDMA CM on
  /// this machine), -ESHUTDOWN (its Reactor is gone), or what rdma_resolve_addr said.
  int connect(const std::string& address, uint16_t port, std::vector<uint8_t> privateData = {}) noexcept;

 private:
  explicit Client(std::unique_ptr<ClientCore> core) noexcept;
  ~Client() override;
};

}  // namespace evrdma
