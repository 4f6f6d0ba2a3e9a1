// StreamPort: each of a stream's needs, answered by the connection's part that holds it.
#include "StreamPort.h"

#include "ConnectionCore.h"
#include "evrdma/Connection.h"

namespace evrdma::detail {

int StreamPort::takeSendSpace(size_t length, SendSpace& space) noexcept {
  const int slot = coreOf(connection_).sender.takeSendBuffer(length, false, space.data);
  space.slot = slot;
  return slot < 0 ? slot : 0;
}

int StreamPort::send(const SendSpace& space, size_t length, uint64_t tag) noexcept {
  return coreOf(connection_).sender.sendTaken(space.slot, space.data, length, false, 0, tag);
}

int StreamPort::sendInPlace(const uint8_t* data, size_t length, uint32_t lkey, uint64_t tag) noexcept {
  return coreOf(connection_).sender.sendRegistered(data, length, lkey, tag);
}

ibv_pd* StreamPort::protectionDomain() const noexcept { return connection_.protectionDomain(); }

void StreamPort::deliverTo(StreamReceiver& receiver, size_t lendFrom) noexcept {
  coreOf(connection_).receiver.deliverTo(&receiver, lendFrom);
}

uint32_t StreamPort::buffersLent() const noexcept { return coreOf(connection_).receiver.lent(); }

void StreamPort::fail(int err, const char* why) noexcept { coreOf(connection_).fail(err, why); }

bool StreamPort::doneWithPeer() const noexcept { return coreOf(connection_).teardown.doneWithPeer(); }

}  // namespace evrdma::detail
