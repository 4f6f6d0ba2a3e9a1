// Connection: the API over its ConnectionCore: each call forwards to the core or to the part that
// does it (ConnectionSender, ConnectionReceiver, ConnectionTeardown).
#include "evrdma/Connection.h"

#include <cerrno>

#include "ConnectionCore.h"
#include "FramedSender.h"
#include "QueuePair.h"
#include "RegionExchange.h"

namespace evrdma {

const char* toString(ConnectionState state) noexcept {
  switch (state) {
    case ConnectionState::Idle: return "Idle";
    case ConnectionState::ResolvingAddr: return "ResolvingAddr";
    case ConnectionState::ResolvingRoute: return "ResolvingRoute";
    case ConnectionState::Connecting: return "Connecting";
    case ConnectionState::Accepting: return "Accepting";
    case ConnectionState::Established: return "Established";
    case ConnectionState::Disconnecting: return "Disconnecting";
    case ConnectionState::Closed: return "Closed";
    case ConnectionState::Failed: return "Failed";
  }
  return "?";
}

Connection::Connection(std::unique_ptr<ConnectionCore> core) noexcept : core_(std::move(core)) {
  core_->attach(*this);
}

Connection::~Connection() = default;

ConnectionState Connection::state() const noexcept { return core_->state(); }
bool Connection::isClient() const noexcept { return core_->isClient_; }

int Connection::postSend(const void* data, size_t length, uint64_t tag) noexcept {
  return core_->sender.copyAndSend(data, length, false, 0, tag);
}
int Connection::postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag) noexcept {
  return core_->sender.copyAndSend(data, length, true, imm, tag);
}
int Connection::sendReceived(uint64_t tag) noexcept { return core_->receiver.sendDelivering(tag); }
int Connection::send(const Slice& local, uint64_t tag) noexcept {
  return core_->sender.checkedSubmit(OpType::Send, local, nullptr, 0, false, 0, tag);
}
int Connection::sendWithImm(const Slice& local, uint32_t imm, uint64_t tag) noexcept {
  return core_->sender.checkedSubmit(OpType::Send, local, nullptr, 0, true, imm, tag);
}
int Connection::rdmaWrite(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept {
  return core_->sender.checkedSubmit(OpType::Write, local, &remote, remoteOffset, false, 0, tag);
}
int Connection::rdmaWriteWithImm(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint32_t imm,
                                 uint64_t tag) noexcept {
  return core_->sender.checkedSubmit(OpType::WriteWithImm, local, &remote, remoteOffset, true, imm, tag);
}
int Connection::rdmaRead(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept {
  return core_->sender.checkedSubmit(OpType::Read, local, &remote, remoteOffset, false, 0, tag);
}
bool Connection::supportsImmediateData() const noexcept { return core_->supportsImmediateData(); }
void Connection::beginBatch() noexcept { core_->sender.beginBatch(); }
int Connection::endBatch() noexcept { return core_->sender.endBatch(); }

int Connection::requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept {
  return core_->sender.requestRegion(bytes, access, tag);
}
int Connection::sendRegion(const MemoryRegion& region, uint64_t tag) noexcept {
  return core_->sender.sendRegion(region, tag);
}
int Connection::releaseRegion(const RemoteRegion& region) noexcept { return core_->sender.releaseRegion(region); }
const std::vector<RemoteRegion>& Connection::peerRegions() const noexcept {
  static const std::vector<RemoteRegion> kNone;
  return core_->regionExchange_ ? core_->regionExchange_->peerRegions() : kNone;
}
uint64_t Connection::lentBytes() const noexcept {
  return core_->regionExchange_ ? core_->regionExchange_->lentBytes() : 0;
}

uint32_t Connection::sendCredits() const noexcept {
  return core_->flowControl_ ? core_->flowControl_->credits() : 0;
}
uint32_t Connection::creditsOwed() const noexcept {
  return core_->flowControl_ ? core_->flowControl_->owed() : 0;
}
bool Connection::framed() const noexcept { return core_->options_.framed; }
uint64_t Connection::peerMaxMessageSize() const noexcept { return core_->peerMaxMessageSize_; }
size_t Connection::sendBacklog() const noexcept { return core_->sender.backlog(); }
SendQueueStats Connection::sendQueueStats() const noexcept { return core_->sender.queueStats(); }

int Connection::pauseReceiving() noexcept { return core_->receiver.pause(); }
int Connection::resumeReceiving() noexcept { return core_->receiver.resume(); }
bool Connection::receivingPaused() const noexcept { return core_->receiver.paused(); }
uint32_t Connection::recvDepth() const noexcept { return core_->options_.recvDepth; }
uint32_t Connection::receivesHeld() const noexcept { return core_->receiver.held(); }
int Connection::postRecv() noexcept { return core_->receiver.postRecv(); }
void Connection::close() noexcept { core_->close(); }

size_t Connection::maxMessageSize() const noexcept { return core_->options_.maxMessageSize; }
uint32_t Connection::freeSendBuffers() const noexcept {
  return core_->queuePair_ ? core_->queuePair_->sendBuffers().available() : 0;
}
uint32_t Connection::postedRecvs() const noexcept {
  return core_->queuePair_ ? core_->queuePair_->postedReceives() : 0;
}
const std::string& Connection::peerAddress() const noexcept { return core_->peerAddress_; }
const ConnectionStats& Connection::stats() const noexcept { return core_->tally_.own; }
int Connection::error() const noexcept { return core_->teardown.error(); }
std::chrono::steady_clock::time_point Connection::createdAt() const noexcept { return core_->createdAt_; }
std::chrono::steady_clock::time_point Connection::establishedAt() const noexcept { return core_->establishedAt_; }
ConnectionHandler& Connection::handler() const noexcept { return *core_->handler_; }
Reactor& Connection::reactor() const noexcept { return core_->reactor_; }
const CompletionStats* Connection::completionStats() const noexcept { return core_->completionStats_; }
ibv_context* Connection::device() const noexcept { return core_->device_; }
rdma_cm_id* Connection::cmId() const noexcept { return core_->id_.get(); }
ibv_pd* Connection::protectionDomain() const noexcept {
  return core_->queuePair_ ? core_->queuePair_->protectionDomain() : nullptr;
}

}  // namespace evrdma
