#include "SendQueue.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>

#include "WorkRequestId.h"

namespace evrdma {

const char* toString(OpType type) noexcept {
  switch (type) {
    case OpType::Send: return "send";
    case OpType::Write: return "RDMA write";
    case OpType::WriteWithImm: return "RDMA write with immediate";
    case OpType::Read: return "RDMA read";
  }
  return "?";
}

SendQueue::SendQueue(uint32_t depth, uint32_t signalEvery, uint32_t maxInline, uint32_t serial, Post post)
    : depth_(std::max<uint32_t>(depth, 1)),
      signalEvery_(std::clamp<uint32_t>(signalEvery, 1, std::max<uint32_t>(depth, 1))),
      maxInline_(maxInline),
      serial_(serial),
      post_(std::move(post)) {}

int SendQueue::submit(SendOp op) noexcept {
  backlog_.push_back(op);
  return batchDepth_ > 0 ? 0 : pump();
}

int SendQueue::endBatch() noexcept {
  if (batchDepth_ > 0) --batchDepth_;
  return batchDepth_ > 0 ? 0 : pump();
}

std::deque<SendOp> SendQueue::takeBacklog() noexcept {
  std::deque<SendOp> taken;
  taken.swap(backlog_);
  return taken;
}

std::deque<SendOp> SendQueue::takeInFlight() noexcept {
  std::deque<SendOp> taken;
  taken.swap(inFlight_);
  return taken;
}

int SendQueue::pump() noexcept {
  size_t room = depth_ - inFlight_.size();
  size_t count = std::min(room, backlog_.size());
  if (count == 0) return 0;
  wrs_.assign(count, ibv_send_wr{});
  sges_.assign(2 * count, ibv_sge{});
  for (size_t i = 0; i < count; ++i) {
    SendOp& op = backlog_[i];
    op.sequence = nextSequence_++;
    // Signal every Nth, the last of this post (so nothing waits for a completion that never
    // comes), and whatever fills the send queue (its room is only given back by a completion).
    bool last = i + 1 == count;
    op.signaled = ++sinceSignal_ >= signalEvery_ || last || inFlight_.size() + i + 1 == depth_;
    if (op.signaled) sinceSignal_ = 0;
    ibv_send_wr& wr = wrs_[i];
    wr.wr_id = detail::wrid::send(serial_, op.sequence);
    ibv_sge* sges = &sges_[2 * i];
    int sgeCount = 0;
    if (op.header.length > 0) sges[sgeCount++] = op.header;
    if (op.sge.length > 0) sges[sgeCount++] = op.sge;
    const uint64_t bytes = uint64_t{op.header.length} + op.sge.length;
    wr.sg_list = sges;
    wr.num_sge = sgeCount;
    wr.next = last ? nullptr : &wrs_[i + 1];
    wr.send_flags = op.signaled ? IBV_SEND_SIGNALED : 0;
    if (op.type != OpType::Read && bytes > 0 && bytes <= maxInline_) wr.send_flags |= IBV_SEND_INLINE;
    switch (op.type) {
      case OpType::Send:
        wr.opcode = op.hasImm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        break;
      case OpType::Write:
        wr.opcode = IBV_WR_RDMA_WRITE;
        break;
      case OpType::WriteWithImm:
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        break;
      case OpType::Read:
        wr.opcode = IBV_WR_RDMA_READ;
        break;
    }
    if (op.hasImm) wr.imm_data = htonl(op.imm);
    if (op.type != OpType::Send) {
      wr.wr.rdma.remote_addr = op.remoteAddress;
      wr.wr.rdma.rkey = op.rkey;
    }
  }
  ibv_send_wr* bad = nullptr;
  int rc = post_(wrs_.data(), &bad);
  ++posts_;
  if (rc != 0) return rc > 0 ? -rc : rc;
  for (size_t i = 0; i < count; ++i) {
    if (backlog_.front().signaled) ++signaledCount_;
    inFlight_.push_back(backlog_.front());
    backlog_.pop_front();
  }
  requests_ += count;
  return 0;
}

int SendQueue::complete(const ibv_wc& wc, const Done& done) noexcept {
  const uint32_t sequence = detail::wrid::index(wc.wr_id);
  bool known = std::any_of(inFlight_.begin(), inFlight_.end(), [&](const SendOp& op) { return op.sequence == sequence; });
  if (!known) return 0;  // already completed (a flush of a request counted before)
  while (!inFlight_.empty()) {
    SendOp op = inFlight_.front();
    inFlight_.pop_front();
    bool isThis = op.sequence == sequence;
    done(op, isThis ? wc.status : IBV_WC_SUCCESS);
    if (isThis) break;
  }
  return pump();
}

}  // namespace evrdma
