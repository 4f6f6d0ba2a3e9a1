// The blast roles (Blast.h): the client that keeps its operations in flight and checks every byte,
// the server's agent for each mode, and the factory that reads a client's request.
#include "Blast.h"

#include "evrdma/Reactor.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace blast {
namespace {

constexpr uint64_t kDoneTag = ~uint64_t{0};
constexpr size_t kMaxReceiveMemory = size_t{256} << 20;  // per agent, for send mode's receive ring

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

void fillRange(uint8_t* data, size_t size, uint64_t seq, bool patterned, size_t from, size_t to) {
  const size_t head = std::min<size_t>(8, size);
  if (from < head) {
    uint8_t bytes[8];
    std::memcpy(bytes, &seq, sizeof bytes);
    std::memcpy(data + from, bytes + from, std::min(to, head) - from);
  }
  if (patterned)
    for (size_t i = std::max<size_t>(from, 8); i < to; ++i) data[i] = patternByte(seq, i);
}

void fill(uint8_t* data, size_t size, uint64_t seq, bool patterned) { fillRange(data, size, seq, patterned, 0, size); }

std::string check(const uint8_t* data, size_t size, uint64_t seq, bool patterned) {
  uint64_t got = 0;
  std::memcpy(&got, data, std::min<size_t>(8, size));
  uint64_t want = seq;
  if (size < 8) want &= (uint64_t{1} << (8 * size)) - 1;
  if (got != want) return "sequence " + std::to_string(got) + " where " + std::to_string(want) + " was due";
  if (patterned)
    for (size_t i = 8; i < size; ++i)
      if (data[i] != patternByte(seq, i)) return "operation " + std::to_string(seq) + ": byte " + std::to_string(i) + " wrong";
  return "";
}

std::string describe(Mode mode, uint64_t operations, uint64_t size, double seconds) {
  const double bytes = static_cast<double>(operations) * static_cast<double>(size);
  char text[200];
  std::snprintf(text, sizeof text, "%s %llu x %llu B in %.3f s: %.1f MB/s (%.3f Gb/s), %.0f ops/s", toString(mode),
                static_cast<unsigned long long>(operations), static_cast<unsigned long long>(size), seconds,
                seconds > 0 ? bytes / seconds / 1e6 : 0.0, seconds > 0 ? bytes * 8 / seconds / 1e9 : 0.0,
                seconds > 0 ? static_cast<double>(operations) / seconds : 0.0);
  return text;
}

// ---- client ----

BlastClient::BlastClient(uint32_t index, Request request, bool trace, std::function<void(const Result&)> done,
                         uint32_t postList)
    : request_(request), trace_(trace), done_(std::move(done)), postList_(std::max<uint32_t>(postList, 1)) {
  result_.index = index;
  result_.mode = request.mode;
}

evrdma::ClientOptions BlastClient::options(const Request& request) {
  evrdma::ClientOptions o;
  o.framed = true;
  o.maxMessageSize = 64;  // the client only sends the final, empty message
  o.recvDepth = 8;
  o.sendDepth = std::min<uint32_t>(4096, request.buffers + 2);
  if (request.mode == Mode::Read) o.initiatorDepth = static_cast<uint8_t>(std::min<uint32_t>(request.buffers, 16));
  return o;
}

void BlastClient::failWith(evrdma::Connection& c, std::string error) noexcept {
  if (result_.error.empty()) result_.error = std::move(error);
  c.close();
}

void BlastClient::onEstablished(evrdma::Connection& c) noexcept {
  result_.established = true;
  if (trace_) std::printf("connection %u: established with %s\n", result_.index, c.peerAddress().c_str());
  int error = 0;
  const int access = request_.mode == Mode::Read ? evrdma::kLocalWrite : 0;
  pool_ = evrdma::BufferPool::allocate(c.protectionDomain(), request_.buffers, request_.size, access, error);
  if (!pool_) return failWith(c, "registering " + std::to_string(request_.buffers) + " buffers: " + errnoText(error));
  switch (request_.mode) {
    case Mode::Send:
      start(c);
      return;
    case Mode::WriteImm:
      if (!c.supportsImmediateData())
        return failWith(c, "write_imm needs immediate data, which this transport (iWARP) does not have");
      [[fallthrough]];
    case Mode::Write:
      if (int rc = c.requestRegion(uint64_t{request_.buffers} * request_.size, evrdma::kRemoteWrite, 1); rc != 0)
        return failWith(c, "requesting a region: " + errnoText(rc));
      return;
    case Mode::Read:
      return;  // the server sends its region
  }
}

void BlastClient::onRegionGranted(evrdma::Connection& c, uint64_t, const evrdma::RemoteRegion& region) noexcept {
  remote_ = region;
  start(c);
}

void BlastClient::onRegionRefused(evrdma::Connection& c, uint64_t, int err) noexcept {
  failWith(c, "the server refused a region of " + std::to_string(uint64_t{request_.buffers} * request_.size) +
                  " B: " + errnoText(err));
}

void BlastClient::onRegionReceived(evrdma::Connection& c, const evrdma::RemoteRegion& region, uint64_t) noexcept {
  if (request_.mode != Mode::Read) return failWith(c, "the server sent a region it was not asked for");
  if (region.length < uint64_t{request_.buffers} * request_.size) return failWith(c, "the server's region is too small");
  remote_ = region;
  start(c);
}

void BlastClient::start(evrdma::Connection& c) noexcept {
  result_.started = Clock::now();
  c.beginBatch();  // the first `buffers` operations go to the device in one post
  while (posted_ < request_.count && pool_.available() > 0 && result_.error.empty()) postNext(c);
  if (int rc = c.endBatch(); rc != 0) failWith(c, "posting: " + errnoText(rc));
}

void BlastClient::postList(evrdma::Connection& c) noexcept {
  c.beginBatch();
  for (uint32_t i = 0; i < postList_ && posted_ < request_.count && pool_.available() > 0 && result_.error.empty(); ++i)
    postNext(c);
  if (int rc = c.endBatch(); rc != 0) failWith(c, "posting: " + errnoText(rc));
}

void BlastClient::postNext(evrdma::Connection& c) noexcept {
  const int index = pool_.acquire();
  if (index < 0) return;
  const uint64_t seq = posted_++;
  const uint64_t tag = seq << 16 | static_cast<uint64_t>(index);
  const evrdma::Slice slice = pool_.slice(static_cast<uint32_t>(index), request_.size);
  const uint64_t offset = (seq % request_.buffers) * request_.size;
  if (request_.mode != Mode::Read) fill(pool_.data(static_cast<uint32_t>(index)), request_.size, seq, request_.patterned);
  int rc = 0;
  switch (request_.mode) {
    case Mode::Send: rc = c.send(slice, tag); break;
    case Mode::Write: rc = c.rdmaWrite(slice, remote_, offset, tag); break;
    case Mode::WriteImm: rc = c.rdmaWriteWithImm(slice, remote_, offset, static_cast<uint32_t>(seq), tag); break;
    case Mode::Read: rc = c.rdmaRead(slice, remote_, offset, tag); break;
  }
  if (rc != 0) failWith(c, std::string("posting ") + toString(request_.mode) + ": " + errnoText(rc));
}

void BlastClient::onOpDone(evrdma::Connection& c, const evrdma::OpCompletion& op) noexcept {
  if (op.status != IBV_WC_SUCCESS) return;  // onError follows
  const uint64_t seq = op.tag >> 16;
  const auto index = static_cast<uint32_t>(op.tag & 0xffff);
  if (request_.mode == Mode::Read && request_.patterned) {
    // The server filled slot j of its region as operation j.
    std::string wrong = check(pool_.data(index), request_.size, seq % request_.buffers, true);
    if (!wrong.empty()) return failWith(c, "read " + std::to_string(seq) + ": " + wrong);
  }
  ++result_.operations;
  result_.bytes += op.bytes;
  pool_.release(index);
  if (posted_ < request_.count) {
    // In lists: once a list's worth is free, or all that is left to post is.
    const uint64_t left = request_.count - posted_;
    if (postList_ == 1)
      postNext(c);
    else if (pool_.available() >= std::min<uint64_t>(postList_, left))
      postList(c);
  } else if (result_.operations == request_.count) {
    result_.finished = Clock::now();
    // An empty message tells the server we are done; close once it went out.
    if (int rc = c.postSend(nullptr, 0, kDoneTag); rc != 0) failWith(c, "sending the end: " + errnoText(rc));
  }
}

void BlastClient::onSendDone(evrdma::Connection& c, uint64_t tag) noexcept {
  if (tag != kDoneTag) return;
  result_.succeeded = result_.error.empty();
  c.close();
}

void BlastClient::onDisconnected(evrdma::Connection&) noexcept {
  if (!result_.succeeded && result_.error.empty())
    result_.error = "the server disconnected after " + std::to_string(result_.operations) + " of " +
                    std::to_string(request_.count) + " operations";
}

void BlastClient::onRejected(evrdma::Connection&, const evrdma::RejectInfo& info) noexcept {
  result_.error = "rejected: " + info.reason;
}

void BlastClient::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (result_.error.empty()) result_.error = std::string(op) + ": " + errnoText(err);
}

void BlastClient::onClosed(evrdma::Connection& c) noexcept {
  if (!result_.error.empty()) result_.succeeded = false;
  result_.creditWaits = c.stats().creditWaits;
  if (result_.finished == Clock::time_point{}) result_.finished = Clock::now();
  if (done_) done_(result_);
}

// ---- agent ----

evrdma::ConnectionOptions BlastAgent::options(const Request& request) {
  evrdma::ConnectionOptions o;
  o.framed = true;
  o.sendDepth = 16;
  o.maxMessageSize = request.mode == Mode::Send ? request.size : 64;
  uint32_t depth = 8;
  if (request.mode == Mode::Send || request.mode == Mode::WriteImm) {
    // Room for what is in flight, and for credits to come back while it is.
    depth = std::clamp<uint32_t>(4 * request.buffers, 16, 4096);
    while (depth > evrdma::ConnectionOptions::kMinFramedRecvDepth && size_t{depth} * o.maxMessageSize > kMaxReceiveMemory) depth /= 2;
    depth = std::max(depth, evrdma::ConnectionOptions::kMinFramedRecvDepth);
  }
  o.recvDepth = depth;
  o.maxLentBytes = uint64_t{request.buffers} * request.size;
  // The write modes' client asks for that region once established: registered at the accept, the
  // request is answered without a registration in the receive path.
  if (request.mode == Mode::Write || request.mode == Mode::WriteImm) o.lendingPoolBytes = o.maxLentBytes;
  if (request.mode == Mode::Read) o.responderResources = static_cast<uint8_t>(std::min<uint32_t>(request.buffers, 16));
  // The region a read-mode agent offers is registered on the connection's protection domain: its
  // own, so no other client reaches it (lending agents have one anyway).
  o.ownProtectionDomain = true;
  return o;
}

void BlastAgent::failWith(evrdma::Connection& c, std::string text) noexcept {
  if (error.empty()) error = std::move(text);
  c.close();
}

void BlastAgent::onEstablished(evrdma::Connection& c) noexcept {
  established = Clock::now();
  if (trace_)
    std::printf("agent %s: %s, %u buffers of %u B, count %llu\n", c.peerAddress().c_str(), toString(request_.mode),
                request_.buffers, request_.size, static_cast<unsigned long long>(request_.count));
  if (request_.mode != Mode::Read) return;
  int err = 0;
  offered_ = evrdma::MemoryRegion::allocate(c.protectionDomain(), uint64_t{request_.buffers} * request_.size,
                                            evrdma::kRemoteRead, err);
  if (!offered_) return failWith(c, "registering the region to read: " + errnoText(err));
  // Filled a piece per loop turn (a timer of 0 ms: the loop polls its backend in between), then sent.
  filler_ = std::make_unique<evrdma::Timer>(c.reactor(), [this, &c] { fillSome(c); });
  if (filling != nullptr) ++*filling;
  fillSome(c);
}

void BlastAgent::fillSome(evrdma::Connection& c) noexcept {
  const uint64_t total = offered_.length();
  const uint64_t end = std::min<uint64_t>(total, filled_ + kFillPerTurn);
  for (; filled_ < end;) {
    const uint64_t slot = filled_ / request_.size, from = filled_ % request_.size;
    const uint64_t to = std::min<uint64_t>(request_.size, from + (end - filled_));
    fillRange(offered_.data() + slot * request_.size, request_.size, slot, request_.patterned, from, to);
    filled_ += to - from;
  }
  if (filled_ < total) {
    if (int rc = filler_->startOnce(std::chrono::milliseconds(0)); rc != 0) failWith(c, "filling the region: " + errnoText(rc));
    return;
  }
  stopFilling();
  if (int rc = c.sendRegion(offered_, 0); rc != 0) failWith(c, "sending the region: " + errnoText(rc));
}

void BlastAgent::stopFilling() noexcept {
  if (!filler_) return;
  filler_->cancel();
  if (filling != nullptr) --*filling;
  filling = nullptr;
}

void BlastAgent::onRegionLent(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept {
  // The client asks for the region itself: it must hold every slot its request said it writes.
  const uint64_t needed = uint64_t{request_.buffers} * request_.size;
  if (lent_ != nullptr) return failWith(c, "the client asked for a second region");
  if (region.length() < needed)
    return failWith(c, "the client asked for a region of " + std::to_string(region.length()) + " B; its request of " +
                           std::to_string(request_.buffers) + " buffers of " + std::to_string(request_.size) +
                           " B needs " + std::to_string(needed));
  lent_ = &region;
}

void BlastAgent::onRegionReleased(evrdma::Connection&, const evrdma::MemoryRegion& region) noexcept {
  if (&region == lent_) lent_ = nullptr;  // gone after this call: onDone must not look into it
}

void BlastAgent::onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept {
  if (length == 0) return onDone(c);
  if (request_.mode != Mode::Send) return failWith(c, "a message in " + std::string(toString(request_.mode)) + " mode");
  if (length != request_.size)
    return failWith(c, "a message of " + std::to_string(length) + " B, not " + std::to_string(request_.size));
  std::string wrong = check(data, length, received_, request_.patterned);
  if (!wrong.empty()) return failWith(c, "message " + std::to_string(received_) + ": " + wrong);
  ++received_;
  receivedBytes_ += length;
}

void BlastAgent::onRecvWithImm(evrdma::Connection& c, uint32_t imm, const uint8_t* data, size_t length) noexcept {
  if (request_.mode != Mode::WriteImm || data != nullptr) return failWith(c, "an unexpected message with immediate data");
  if (imm != static_cast<uint32_t>(received_))
    return failWith(c, "immediate " + std::to_string(imm) + " where " + std::to_string(received_) + " was due");
  if (length != request_.size) return failWith(c, "a write of " + std::to_string(length) + " B");
  ++received_;
  receivedBytes_ += length;
}

void BlastAgent::onDone(evrdma::Connection& c) noexcept {
  finished = Clock::now();
  const bool counted = request_.mode == Mode::Send || request_.mode == Mode::WriteImm;
  if (counted && received_ != request_.count)
    return failWith(c, "the client ended after " + std::to_string(received_) + " of " +
                           std::to_string(request_.count) + " operations arrived");
  if ((request_.mode == Mode::Write || request_.mode == Mode::WriteImm)) {
    if (lent_ == nullptr) return failWith(c, "the client ended without a region to check (never asked for, or released)");
    // Each slot holds the last operation written into it.
    for (uint64_t slot = 0; slot < request_.buffers && slot < request_.count; ++slot) {
      const uint64_t last = slot + (request_.count - 1 - slot) / request_.buffers * request_.buffers;
      std::string wrong = check(lent_->data() + slot * request_.size, request_.size, last, request_.patterned);
      if (!wrong.empty()) return failWith(c, "slot " + std::to_string(slot) + ": " + wrong);
    }
    receivedBytes_ = request_.count * request_.size;
  }
  if (request_.mode == Mode::Read) receivedBytes_ = request_.count * request_.size;
  complete = true;
}

void BlastAgent::onDisconnected(evrdma::Connection&) noexcept {
  if (!complete && error.empty()) error = "the client disconnected before it was done";
}

void BlastAgent::onError(evrdma::Connection&, int err, const char* op) noexcept {
  if (error.empty()) error = std::string(op) + ": " + errnoText(err);
}

void BlastAgent::onClosed(evrdma::Connection& c) noexcept {
  stopFilling();
  if (finished == Clock::time_point{}) finished = Clock::now();
  if (closedHook) closedHook(*this, c);
}

// ---- factory ----

evrdma::AcceptDecision BlastFactory::onConnectRequest(const evrdma::ConnectRequest& connect) noexcept {
  Request request;
  std::string refused = decode(connect.privateData.data(), connect.privateData.size(), limits_, request);
  const uint64_t readBytes = request.mode == Mode::Read ? uint64_t{request.buffers} * request.size : 0;
  evrdma::MemoryCharge readCharge;
  if (refused.empty() && readBytes > 0 && reactor_ != nullptr && reactor_->chargeMemory(readBytes, readCharge) != 0)
    refused = "memory budget: " + std::to_string(reactor_->registeredMemory() >> 20) + " of " +
              std::to_string(reactor_->memoryBudget() >> 20) + " MiB in use, the region to read needs " +
              std::to_string(readBytes >> 20) + " MiB";
  if (!refused.empty()) {
    if (trace_) std::printf("rejecting %s: %s\n", connect.peerAddress.c_str(), refused.c_str());
    return evrdma::AcceptDecision::reject(refused);
  }
  auto agent = std::make_unique<BlastAgent>(request, trace_);
  agent->filling = &regionsBeingFilled;
  agent->readRegionCharge = std::move(readCharge);
  agent->closedHook = [this](const BlastAgent& a, const evrdma::Connection& c) {
    --activeAgents;
    // Never established, no error: the client gave up before the accept reached it (counted in
    // Listener::stats().abandoned), not a client served.
    if (a.established == Clock::time_point{} && a.error.empty()) {
      if (agentClosedHook) agentClosedHook(a, c);
      return;
    }
    ++agentsServed;
    if (!a.complete) ++(a.error.empty() ? agentsIncomplete : agentsFailed);
    if (agentClosedHook) agentClosedHook(a, c);
  };
  ++activeAgents;
  return evrdma::AcceptDecision::accept(std::move(agent), BlastAgent::options(request));
}

}  // namespace blast
