// Client: the API of the active side, over its ClientCore.
#include "evrdma/Client.h"

#include "ClientCore.h"

namespace evrdma {

Client::Client(std::unique_ptr<ClientCore> core) noexcept : Connection(std::move(core)) {}

Client::~Client() = default;

void Client::Release::operator()(Client* client) const noexcept {
  static_cast<ClientCore&>(coreOf(*client)).release();  // frees the client now or after onClosed
}

Client::Ptr Client::create(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ClientOptions& options) {
  return Ptr(new Client(std::make_unique<ClientCore>(reactor, std::move(handler), options)));
}

int Client::connect(const std::string& address, uint16_t port, std::vector<uint8_t> privateData) noexcept {
  return static_cast<ClientCore&>(coreOf(*this)).connect(address, port, std::move(privateData));
}

}  // namespace evrdma
