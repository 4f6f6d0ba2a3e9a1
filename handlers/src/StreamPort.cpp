// StreamPort: each of a stream's needs, answered by the connection's part that holds it.
#include "StreamPort.h"

#include "ConnectionCore.h"

namespace evrdma::detail {

int StreamPort::send(size_t length, Fill fill, void* source, uint64_t tag) noexcept {
  return coreOf(connection_).sender.fillAndSend(length, fill, source, tag);
}

void StreamPort::lendFrom(size_t bytes) noexcept { coreOf(connection_).receiver.lendFrom(bytes); }

ReceiveLoan* StreamPort::lendDelivering() noexcept { return coreOf(connection_).receiver.lendDelivering(); }

uint32_t StreamPort::buffersLent() const noexcept { return coreOf(connection_).receiver.lent(); }

void StreamPort::fail(int err, const char* why) noexcept { coreOf(connection_).fail(err, why); }

bool StreamPort::doneWithPeer() const noexcept { return coreOf(connection_).teardown.doneWithPeer(); }

}  // namespace evrdma::detail
