// rping's roles on evrdma (Rping.h): the server's read-then-write and the client's advertisements,
// step by step as rdma-core's rping runs them.
#include "Rping.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "evrdma/ByteOrder.h"

namespace rping {
namespace {

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

void encode(const Info& info, uint8_t* out) {
  evrdma::putBig64(out, info.address);
  evrdma::putBig32(out + 8, info.rkey);
  evrdma::putBig32(out + 12, info.size);
}

Info decode(const uint8_t* in) {
  return Info{evrdma::getBig64(in), evrdma::getBig32(in + 8), evrdma::getBig32(in + 12)};
}

void fillPing(char* buffer, size_t size, uint64_t ping) {
  int prefix = std::snprintf(buffer, size, "rdma-ping-%" PRIu64 ": ", ping);
  size_t at = prefix < 0 ? 0 : std::min(static_cast<size_t>(prefix), size);
  char letter = static_cast<char>('A' + ping % ('z' - 'A' + 1));  // 'A'..'z', moving on each ping
  for (; at < size; ++at) {
    buffer[at] = letter;
    letter = letter == 'z' ? 'A' : static_cast<char>(letter + 1);
  }
  buffer[size - 1] = '\0';
}

// ---- client ----

evrdma::ClientOptions RpingClient::options() {
  evrdma::ClientOptions o;
  static_cast<evrdma::ConnectionOptions&>(o) = RpingAgent::options();  // both sides alike
  return o;
}

void RpingClient::failWith(evrdma::Connection& c, std::string error) noexcept {
  if (outcome_.error.empty()) outcome_.error = std::move(error);
  c.close();
}

void RpingClient::onEstablished(evrdma::Connection& c) noexcept {
  if (s_.debug) std::printf("rping client: connected to %s\n", c.peerAddress().c_str());
  int err = 0;
  // Least access: the server only reads the start buffer and only writes the other.
  start_ = evrdma::MemoryRegion::allocate(c.protectionDomain(), s_.size, evrdma::kRemoteRead, err);
  if (start_) rdma_ = evrdma::MemoryRegion::allocate(c.protectionDomain(), s_.size, evrdma::kRemoteWrite, err);
  if (!start_ || !rdma_) return failWith(c, "registering the ping buffers: " + errnoText(err));
  startPing(c);
}

void RpingClient::advertise(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept {
  uint8_t message[kInfoSize];
  encode(Info{reinterpret_cast<uintptr_t>(region.data()), region.get()->rkey, static_cast<uint32_t>(s_.size)}, message);
  if (int rc = c.postSend(message, sizeof message); rc != 0) failWith(c, "sending: " + errnoText(rc));
}

void RpingClient::startPing(evrdma::Connection& c) noexcept {
  fillPing(reinterpret_cast<char*>(start_.data()), s_.size, outcome_.pings);
  std::memset(rdma_.data(), 0, s_.size);  // so a write that never came shows
  step_ = Step::ReadAdvertised;
  advertise(c, start_);
}

void RpingClient::onRecv(evrdma::Connection& c, const uint8_t*, size_t length) noexcept {
  if (length != kInfoSize) return failWith(c, "received bogus data, size " + std::to_string(length));
  if (step_ == Step::ReadAdvertised) {  // the server has read: give it the buffer to write to
    step_ = Step::WriteAdvertised;
    advertise(c, rdma_);
    return;
  }
  // The server has written back.
  if (s_.validate && std::memcmp(start_.data(), rdma_.data(), s_.size) != 0)
    return failWith(c, "data mismatch in ping " + std::to_string(outcome_.pings));
  if (s_.verbose) std::printf("ping data: %s\n", reinterpret_cast<const char*>(rdma_.data()));
  ++outcome_.pings;
  if (s_.count != 0 && outcome_.pings == s_.count) {
    outcome_.ok = true;
    c.close();
    return;
  }
  startPing(c);
}

void RpingClient::onDisconnected(evrdma::Connection&) noexcept {
  if (!outcome_.ok && outcome_.error.empty())
    outcome_.error = "the server disconnected after " + std::to_string(outcome_.pings) + " pings";
}

void RpingClient::onRejected(evrdma::Connection&, const evrdma::RejectInfo& info) noexcept {
  outcome_.error = "rejected: " + info.reason;
}

void RpingClient::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (outcome_.error.empty()) outcome_.error = std::string(op) + ": " + errnoText(err);
}

void RpingClient::onClosed(evrdma::Connection&) noexcept {
  if (!outcome_.error.empty()) outcome_.ok = false;
  if (done_) done_(outcome_);
}

// ---- server side ----

evrdma::ConnectionOptions RpingAgent::options() {
  // One 16-byte message at a time each way; a spare receive and room for the reads and writes.
  evrdma::ConnectionOptions o;
  o.maxMessageSize = kInfoSize;
  o.recvDepth = 2;
  o.sendDepth = 4;
  return o;
}

void RpingAgent::failWith(evrdma::Connection& c, std::string error) noexcept {
  if (outcome_.error.empty()) outcome_.error = std::move(error);
  c.close();
}

void RpingAgent::onEstablished(evrdma::Connection& c) noexcept {
  if (s_.debug) std::printf("rping server: %s connected\n", c.peerAddress().c_str());
  int err = 0;
  buffer_ = evrdma::MemoryRegion::allocate(c.protectionDomain(), s_.size, evrdma::kLocalWrite, err);
  if (!buffer_) failWith(c, "registering the ping buffer: " + errnoText(err));
}

void RpingAgent::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  if (length != kInfoSize) return failWith(c, "received bogus data, size " + std::to_string(length));
  const Info info = decode(data);
  if (info.size == 0 || info.size > s_.size)
    return failWith(c, "the client advertised " + std::to_string(info.size) + " bytes; this server pings with -S " +
                           std::to_string(s_.size));
  // rping registers its buffers for remote read and write alike; each step uses one of them.
  evrdma::RemoteRegion remote{info.address, info.size, info.rkey, evrdma::kRemoteRead | evrdma::kRemoteWrite};
  int rc = 0;
  if (step_ == Step::WaitReadAdvert) {
    step_ = Step::Reading;
    std::memset(buffer_.data(), 0, s_.size);
    rc = c.rdmaRead({&buffer_, 0, info.size}, remote, 0, 0);
  } else if (step_ == Step::WaitWriteAdvert) {
    step_ = Step::Writing;
    // Back goes the text that was read, with its terminator (as rping does).
    size_t echoLength = strnlen(reinterpret_cast<const char*>(buffer_.data()), s_.size);
    echoLength = std::min<size_t>(echoLength + 1, info.size);
    rc = c.rdmaWrite({&buffer_, 0, echoLength}, remote, 0, 1);
  } else {
    return failWith(c, "the client advertised a buffer out of turn");
  }
  if (rc != 0) failWith(c, "posting: " + errnoText(rc));
}

void RpingAgent::goAhead(evrdma::Connection& c) noexcept {
  const uint8_t message[kInfoSize] = {};
  if (int rc = c.postSend(message, sizeof message); rc != 0) failWith(c, "sending: " + errnoText(rc));
}

void RpingAgent::onOpDone(evrdma::Connection& c, const evrdma::OpCompletion& op) noexcept {
  if (op.status != IBV_WC_SUCCESS) return;  // onError follows
  if (step_ == Step::Reading) {
    if (s_.verbose) std::printf("server ping data: %.*s\n", static_cast<int>(s_.size), reinterpret_cast<const char*>(buffer_.data()));
    step_ = Step::WaitWriteAdvert;
  } else {
    ++outcome_.pings;
    step_ = Step::WaitReadAdvert;
  }
  goAhead(c);
}

void RpingAgent::onDisconnected(evrdma::Connection& c) noexcept {
  if (s_.debug) std::printf("rping server: %s disconnected after %" PRIu64 " pings\n", c.peerAddress().c_str(), outcome_.pings);
  // A client ends the test by disconnecting; it is an error only in the middle of a ping.
  if (outcome_.error.empty()) {
    outcome_.ok = step_ == Step::WaitReadAdvert;
    if (!outcome_.ok) outcome_.error = "the client disconnected in the middle of a ping";
  }
}

void RpingAgent::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (outcome_.error.empty()) outcome_.error = std::string(op) + ": " + errnoText(err);
}

void RpingAgent::onClosed(evrdma::Connection& c) noexcept {
  if (!outcome_.error.empty()) outcome_.ok = false;
  if (done_) done_(outcome_, c);
}

}  // namespace rping
