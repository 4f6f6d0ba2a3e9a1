// What a listener does with a connect request's id before any agent holds it: answer no with a
// reason, tell whether its client still waits, let go of one whose client gave up. And two facts
// about listening: whether an address is a wildcard, the kernel's limit on a backlog.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <string>

namespace evrdma::detail {

// Rejects with `reason` (logged, and readable by the client); the id stays (an agent holds it).
void refuseRequest(rdma_cm_id* id, const std::string& reason) noexcept;
// Rejects with `reason` (logged, and readable by the client) and destroys the id (its event is
// acked already).
void rejectRequest(rdma_cm_id* id, const std::string& reason) noexcept;
// False once the client has given up on the request (the kernel's CM no longer waits for our
// answer to it).
bool requestStillWaiting(rdma_cm_id* id) noexcept;
// A request whose client gave up: logged, its id destroyed without an answer.
void forgetAbandonedRequest(rdma_cm_id* id) noexcept;

bool isWildcard(const sockaddr_storage& address) noexcept;
// net.rdma_ucm.max_backlog; 1024 if unreadable.
int readKernelMaxBacklog() noexcept;

}  // namespace evrdma::detail
