// ClientCore: the client's role behind a Client: address and route resolution, the connect
// request (through the Reactor's ConnectGate), the connect timeout, the answer (established,
// rejected with the peer's reason, or failed), and its own release.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ConnectionCore.h"
#include "evrdma/Client.h"

namespace evrdma {

class ClientCore final : public ConnectionCore {
 public:
  ClientCore(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ClientOptions& options);
  ~ClientCore() override;

  // Client::connect.
  int connect(const std::string& address, uint16_t port, std::vector<uint8_t> privateData) noexcept;
  // The application dropped its Client::Ptr: close, and free the Client after onClosed.
  void release() noexcept;

 private:
  void onAddressResolved() noexcept override;
  void onRouteResolved() noexcept override;
  void onConnectRejected(const CmEvent& event) noexcept override;
  void onConnectFailed(const CmEvent& event) noexcept override;
  void onEstablishedByRole() noexcept override;
  void onFinished() noexcept override;
  void onOrphaned() noexcept override;
  void onConnectTimeout() noexcept;
  // Starts address resolution on a new id toward destination_; 0 or -errno.
  int resolveOnNewId() noexcept;
  // Sends the connect request (its turn came: see Reactor::setMaxConnectsInFlight).
  void sendConnectRequest() noexcept;
  void leaveConnectGate() noexcept;
  class ConnectTurn;  // its place at the Reactor's connect gate

  ClientOptions clientOptions_;
  std::vector<uint8_t> privateData_;
  sockaddr_storage destination_{};
  sockaddr_storage source_{};  // ClientOptions::sourceAddress, when given (ss_family 0: none)
  int portsRefused_ = 0;  // ids given up because a TCP socket held their port (iWARP)
  Timer connectTimer_;
  std::unique_ptr<ConnectTurn> turn_;
  bool released_ = false;  // the application dropped its Ptr: free after onClosed
  bool done_ = false;
};

}  // namespace evrdma
