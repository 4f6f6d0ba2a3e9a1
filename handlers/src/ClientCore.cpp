// ClientCore: address and route resolution, the connect request (through the Reactor's
// ConnectGate), the connect timeout, the answer, and the Client's release.
#include "ClientCore.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "CmDispatcher.h"
#include "CmEvent.h"
#include "ConnectGate.h"
#include "Logging.h"
#include "ReactorCore.h"
#include "evrdma/Address.h"
#include "evrdma/PrivateData.h"
#include "evrdma/Reactor.h"

namespace evrdma {
namespace {
constexpr int kIbRejectInvalidServiceId = 8;  // IB CM: nobody listens on that port
constexpr int kIbRejectConsumer = 28;         // IB CM: the peer application rejected
// New ids tried when TCP holds the port of the last: with a third of the ports held, all of them
// are held once in 43 million connects.
constexpr int kPortRetries = 16;

// On iWARP (siw) the connection's TCP socket is bound, with SO_REUSEADDR, to the port rdma_cm chose
// for the id, and rdma_cm chose it without asking TCP: a TCP socket still on that port (a
// program's connection in TIME_WAIT) makes rdma_connect fail with EADDRINUSE. The same bind, tried
// now, finds that while a new id costs only one more address resolution.
bool tcpHoldsPortOf(rdma_cm_id* id) noexcept {
  if (!isIwarp(id->verbs)) return false;
  const sockaddr* local = rdma_get_local_addr(id);
  if (local->sa_family != AF_INET && local->sa_family != AF_INET6) return false;
  const int fd = socket(local->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const bool held = bind(fd, local, addressLength(local)) != 0 && errno == EADDRINUSE;
  close(fd);
  return held;
}
}  // namespace

void ClientCore::release() noexcept {
  Connection* client = &facade();
  if (orphaned()) {  // the Reactor is gone: nothing left to close or to defer onto
    delete client;
    return;
  }
  if (life_ == detail::Life::Idle) {
    delete client;  // never started (or connect() failed): no callback is owed, none fires
    return;
  }
  released_ = true;
  if (done_) {
    // Maybe called from one of its callbacks: freed on a later turn, or by onOrphaned if the
    // Reactor goes first (it drops the deferred delete).
    reactor_.defer([client] { delete client; });
    return;
  }
  close();
}

class ClientCore::ConnectTurn final : public detail::ConnectGate::Waiter {
 public:
  explicit ConnectTurn(ClientCore& client) : client_(client) {}
  void onConnectTurn() noexcept override { client_.sendConnectRequest(); }
  bool entered = false;

 private:
  ClientCore& client_;
};

ClientCore::ClientCore(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ClientOptions& options)
    : ConnectionCore(reactor, std::move(handler), options, true),
      clientOptions_(options),
      connectTimer_(reactor, [this] { onConnectTimeout(); }),
      turn_(std::make_unique<ConnectTurn>(*this)) {}

ClientCore::~ClientCore() { leaveConnectGate(); }

void ClientCore::leaveConnectGate() noexcept {
  // An orphan left in onOrphaned, while its Reactor (and gate) still existed.
  if (!turn_->entered) return;
  turn_->entered = false;
  coreOf(reactor_).connectGate().leave(turn_.get());
}

int ClientCore::connect(const std::string& address, uint16_t port, std::vector<uint8_t> privateData) noexcept {
  if (orphaned()) return -ESHUTDOWN;
  if (life_ != detail::Life::Idle) return -EALREADY;
  if (privateData.size() > kMaxPrivateDataAnyTransport) return -EMSGSIZE;
  const char* problem = nullptr;
  if (int rc = evrdma::checkOptions(options_, problem); rc != 0) return rc;
  if (int rc = parseAddress(address, port, destination_); rc != 0) return rc;
  source_ = sockaddr_storage{};
  if (!clientOptions_.sourceAddress.empty()) {
    if (int rc = parseAddress(clientOptions_.sourceAddress, 0, source_); rc != 0) return rc;
    if (source_.ss_family != destination_.ss_family) return -EINVAL;
  }
  if (int rc = resolveOnNewId(); rc != 0) return rc;
  privateData_ = std::move(privateData);
  peerAddress_ = formatAddress(reinterpret_cast<sockaddr*>(&destination_));
  setLife(detail::Life::ResolvingAddr);
  return 0;
}

int ClientCore::resolveOnNewId() noexcept {
  int error = 0;
  CmDispatcher* cm = coreOf(reactor_).cm(error);
  if (cm == nullptr) return error;
  CmId id;
  if (int rc = cm->createId(nullptr, RDMA_PS_TCP, id); rc != 0) return rc;
  sockaddr* source = source_.ss_family != 0 ? reinterpret_cast<sockaddr*>(&source_) : nullptr;
  if (rdma_resolve_addr(id.get(), source, reinterpret_cast<sockaddr*>(&destination_),
                        static_cast<int>(clientOptions_.resolveTimeout.count())) != 0)
    return errno ? -errno : -EINVAL;
  adoptId(std::move(id));  // events of the id come here from now on (a former id is destroyed)
  return 0;
}

void ClientCore::onAddressResolved() noexcept {
  if (portsRefused_ < kPortRetries && tcpHoldsPortOf(id_.get())) {
    ++portsRefused_;
    EVRDMA_LOG(LogLevel::Debug, "client of %s: a TCP socket holds local port %u: resolving again on a new id",
               peerAddress_.c_str(), static_cast<unsigned>(ntohs(rdma_get_src_port(id_.get()))));
    if (int rc = resolveOnNewId(); rc != 0) fail(rc, "rdma_resolve_addr");
    return;
  }
  setLife(detail::Life::ResolvingRoute);
  if (rdma_resolve_route(id_.get(), static_cast<int>(clientOptions_.resolveTimeout.count())) != 0)
    fail(errno ? -errno : -EINVAL, "rdma_resolve_route");
}

void ClientCore::onConnectFailed(const CmEvent& event) noexcept {
  connectTimer_.cancel();
  fail(event.status < 0 ? event.status : -EHOSTUNREACH,
       event.type == RDMA_CM_EVENT_UNREACHABLE ? "connect: peer unreachable" : "connect: connection error");
}

void ClientCore::onRouteResolved() noexcept {
  if (privateData_.size() > maxPrivateData(id_.get(), PrivateDataUse::Connect)) {
    fail(-EMSGSIZE, "rdma_connect: private data longer than this transport carries");
    return;
  }
  const char* op = nullptr;
  if (int rc = setUpVerbs(op); rc != 0) {
    fail(rc, op);
    return;
  }
  setLife(detail::Life::Connecting);
  turn_->entered = true;
  if (coreOf(reactor_).connectGate().enter(turn_.get())) sendConnectRequest();
}

void ClientCore::sendConnectRequest() noexcept {
  if (life_ != detail::Life::Connecting) return;
  rdma_conn_param param = connParam(privateData_);
  connectTimer_.startOnce(clientOptions_.connectTimeout);
  if (rdma_connect(id_.get(), &param) != 0) {
    connectTimer_.cancel();
    // iWARP connects over TCP and may learn of a refusal inside rdma_connect itself.
    if (errno == ECONNREFUSED)
      fail(-ECONNREFUSED, "connect: refused (nobody listens on that port?)");
    else
      fail(errno ? -errno : -EINVAL, "rdma_connect");
  }
}

void ClientCore::onConnectRejected(const CmEvent& event) noexcept {
  connectTimer_.cancel();
  RejectInfo info;
  info.status = event.status;
  info.privateData = event.privateData;
  if (decodeRejectReason(event.privateData.data(), event.privateData.size(), info.reason)) {
    info.reasonFromPeer = true;
  } else if (event.status == kIbRejectConsumer) {
    // Also what the kernel sends for a request its listener never answered: the server closed
    // its listener, or exited, while the request waited.
    info.reason = "rejected by the peer without a reason (its application refused, or the server closed or exited "
                  "before answering)";
  } else if (event.status == kIbRejectInvalidServiceId || event.status == -ECONNREFUSED) {
    fail(-ECONNREFUSED, "connect: refused (nobody listens on that port?)");
    return;
  } else {
    info.reason = "rejected (transport status " + std::to_string(event.status) + ")";
  }
  handler_->onRejected(facade(), info);
  close();
}

void ClientCore::onConnectTimeout() noexcept {
  // libevent runs expired timers before a turn the CM dispatcher deferred (it drains a bounded
  // number of events per turn): the answer may be in our own CM event queue, behind a burst of
  // events. That wait is ours, not the peer's: the verdict waits until the queue has drained.
  int error = 0;
  const CmDispatcher* cm = coreOf(reactor_).cm(error);
  if (cm != nullptr && cm->backlogged()) {
    connectTimer_.startOnce(std::chrono::milliseconds(5));
    return;
  }
  fail(-ETIMEDOUT, "connect: no answer within connectTimeout");
}

void ClientCore::onEstablishedByRole() noexcept {
  connectTimer_.cancel();
  leaveConnectGate();
}

void ClientCore::onOrphaned() noexcept {
  done_ = true;
  leaveConnectGate();  // the Reactor is being destroyed, its gate not yet
  if (released_) delete &facade();  // the application dropped its Ptr already
}

void ClientCore::onFinished() noexcept {
  done_ = true;
  connectTimer_.cancel();
  leaveConnectGate();
  if (released_) {
    Connection* client = &facade();
    reactor_.defer([client] { delete client; });
  }
}

}  // namespace evrdma
