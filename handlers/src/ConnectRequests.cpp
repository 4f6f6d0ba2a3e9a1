// Connect requests no agent holds yet: rejected, still waiting, abandoned; wildcard addresses and
// the kernel's backlog limit.
#include "ConnectRequests.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstdio>

#include "CmDispatcher.h"
#include "Logging.h"
#include "evrdma/Address.h"
#include "evrdma/PrivateData.h"

namespace evrdma::detail {

void refuseRequest(rdma_cm_id* id, const std::string& reason) noexcept {
  EVRDMA_LOG(LogLevel::Info, "rejected the connect request of %s: %s", formatAddress(rdma_get_peer_addr(id)).c_str(),
             reason.c_str());
  auto payload = encodeRejectReason(reason);
  rdma_reject(id, payload.data(), static_cast<uint8_t>(payload.size()));
}

void rejectRequest(rdma_cm_id* id, const std::string& reason) noexcept {
  refuseRequest(id, reason);
  destroyCmId(id);  // its event is acked already
}

bool requestStillWaiting(rdma_cm_id* id) noexcept {
  // The QP attributes for INIT come from the kernel's CM state of the request: once the client
  // rejected it (it does when its connect times out) or went away, that state is gone and the
  // kernel answers EINVAL, as it would to rdma_create_qp and rdma_accept.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  int mask = 0;
  return rdma_init_qp_attr(id, &attr, &mask) == 0 || errno != EINVAL;
}

void forgetAbandonedRequest(rdma_cm_id* id) noexcept {
  EVRDMA_LOG(LogLevel::Info, "the client %s gave up its connect request before it was answered",
             formatAddress(rdma_get_peer_addr(id)).c_str());
  destroyCmId(id);  // its event is acked already
}

bool isWildcard(const sockaddr_storage& address) noexcept {
  if (address.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr == htonl(INADDR_ANY);
  if (address.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  return false;
}

int readKernelMaxBacklog() noexcept {
  int value = 1024;  // the kernel's default
  if (FILE* f = std::fopen("/proc/sys/net/rdma_ucm/max_backlog", "re")) {
    if (std::fscanf(f, "%d", &value) != 1 || value <= 0) value = 1024;
    std::fclose(f);
  }
  return value;
}

}  // namespace evrdma::detail
