// SendQueue: posting within the QP's room, the backlog in order, selective signaling, and batching
// a poll's sends into one post.
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
      post_(std::move(post)),
      inFlight_(size_t{depth_} + 1),
      wrs_(depth_),
      sges_(2 * size_t{depth_}) {}

SendQueue::SendQueue(uint32_t depth, uint32_t signalEvery, uint32_t maxInline, uint32_t serial, ibv_qp* qp)
    : SendQueue(depth, signalEvery, maxInline, serial, Post{}) {
  qp_ = qp;
}

int SendQueue::submit(const SendOp& op) noexcept {
  const bool atOnce = firstAtOnce_;
  firstAtOnce_ = false;
  if (batchDepth_ > 0 && !atOnce) {
    if (backlog_.empty() && inFlightCount_ + staged_ < depth_) {
      // It waits for the batch's end in the ring slot it will be posted from (copied once): a
      // batch that fits needs no backlog, whose storage a connection would keep for good.
      slotAfterInFlight(staged_) = op;
      ++staged_;
    } else {
      backlog_.push_back(op);
    }
    return 0;
  }
  if (staged_ > 0 || !backlog_.empty() || inFlightCount_ == depth_) {
    backlog_.push_back(op);
    return pump();
  }
  // Nothing waits ahead of it and there is room: straight out, no queuing, prepared where it
  // waits for its completion (the ring's next slot), so it is copied once.
  SendOp& slot = slotAfterInFlight(0);
  slot = op;
  prepare(slot, wrs_[0], &sges_[0], true, inFlightCount_ + 1);
  if (int rc = post(&wrs_[0]); rc != 0) {
    backlog_.push_back(slot);  // it is still the application's: the teardown hands it back
    return rc;
  }
  noteInFlight(slot);
  return 0;
}

int SendQueue::endBatch() noexcept {
  if (batchDepth_ > 0) --batchDepth_;
  if (batchDepth_ == 0) firstAtOnce_ = false;
  return batchDepth_ > 0 ? 0 : pump();
}

std::deque<SendOp> SendQueue::takeBacklog() noexcept {
  std::deque<SendOp> taken;
  for (size_t i = 0; i < staged_; ++i) taken.push_back(slotAfterInFlight(i));
  staged_ = 0;
  for (size_t i = 0; i < backlog_.size(); ++i) taken.push_back(backlog_[i]);
  backlog_.clear();
  return taken;
}

std::deque<SendOp> SendQueue::takeInFlight() noexcept {
  std::deque<SendOp> taken;
  while (inFlightCount_ > 0) taken.push_back(popInFlight());
  return taken;
}

void SendQueue::noteInFlight(const SendOp& op) noexcept {
  ++inFlightCount_;
  if (op.signaled) ++signaledCount_;
  ++requests_;
}

void SendQueue::prepare(SendOp& op, ibv_send_wr& wr, ibv_sge* sges, bool last, size_t inFlightAfter) noexcept {
  op.sequence = nextSequence_++;
  // Signal every Nth, the last of this post (so nothing waits for a completion that never
  // comes), and whatever fills the send queue (its room is only given back by a completion).
  op.signaled = ++sinceSignal_ >= signalEvery_ || last || inFlightAfter == depth_;
  if (op.signaled) sinceSignal_ = 0;
  // Every field an RC send, write or read uses is set below (the unions of the other kinds, UD's
  // address, atomics, memory windows, TSO, are left as they are): no 128-byte clear per request.
  wr.wr_id = detail::wrid::send(serial_, op.sequence);
  int sgeCount = 0;
  if (op.header.length > 0) sges[sgeCount++] = op.header;
  if (op.sge.length > 0) sges[sgeCount++] = op.sge;
  const uint64_t bytes = uint64_t{op.header.length} + op.sge.length;
  wr.sg_list = sges;
  wr.num_sge = sgeCount;
  wr.next = last ? nullptr : &wr + 1;
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
  wr.imm_data = op.hasImm ? htonl(op.imm) : 0;
  wr.wr.rdma.remote_addr = op.type != OpType::Send ? op.remoteAddress : 0;
  wr.wr.rdma.rkey = op.type != OpType::Send ? op.rkey : 0;
}

int SendQueue::post(ibv_send_wr* first) noexcept {
  ibv_send_wr* bad = nullptr;
  int rc = qp_ != nullptr ? ibv_post_send(qp_, first, &bad) : post_(first, &bad);
  ++posts_;
  return rc > 0 ? -rc : rc;
}

int SendQueue::pumpWaiting() noexcept {
  // What a batch staged in the ring goes first, then what fits of the backlog, moved into the
  // ring's next slots; all in one post.
  const size_t fromBacklog = std::min(depth_ - inFlightCount_ - staged_, backlog_.size());
  const size_t count = staged_ + fromBacklog;
  if (count == 0) return 0;
  for (size_t i = 0; i < count; ++i) {
    SendOp& slot = slotAfterInFlight(i);
    if (i >= staged_) slot = backlog_[i - staged_];
    prepare(slot, wrs_[i], &sges_[2 * i], i + 1 == count, inFlightCount_ + i + 1);
  }
  // Failed: nothing went; the staged stay staged and the backlog keeps its own (the teardown takes both).
  if (int rc = post(wrs_.data()); rc != 0) return rc;
  for (size_t i = 0; i < count; ++i) noteInFlight(slotAfterInFlight(0));
  for (size_t i = 0; i < fromBacklog; ++i) backlog_.pop_front();
  staged_ = 0;
  return 0;
}

}  // namespace evrdma
