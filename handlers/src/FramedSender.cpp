// FramedSender: spending and waiting for credits, the frame slots, and the line of frames that wait
// for a credit.
#include "FramedSender.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "Frame.h"

namespace evrdma::detail {

static_assert(Frame::kHeaderSize + RemoteRegion::kWireSize + 8 <= FramedSender::kSlotSize);

FramedSender::FramedSender(CreditLedger& credits, uint8_t* slotMemory, uint32_t slotCount, uint32_t slotLkey,
                           ConnectionTally& stats, FrameOutlet& outlet)
    : ledger_(credits),
      slotMemory_(slotMemory),
      slotLkey_(slotLkey),
      stats_(stats),
      outlet_(outlet),
      maxWaitingAnswers_(2 * credits.depth() + 16) {
  freeSlots_.reserve(slotCount);
  for (uint32_t slot = slotCount; slot-- > 0;) freeSlots_.push_back(slot);
}

uint8_t* FramedSender::takeSlot(SendOp& op) noexcept {
  const uint32_t slot = freeSlots_.back();
  freeSlots_.pop_back();
  op.frameSlot = static_cast<int32_t>(slot);
  return slotMemory_ + size_t{slot} * kSlotSize;
}

void FramedSender::releaseSlot(int32_t slot) noexcept {
  if (slot >= 0) freeSlots_.push_back(static_cast<uint32_t>(slot));
}

int FramedSender::sendHello(uint64_t maxMessageSize) noexcept {
  // The first frame of the connection: every slot is free, and the peer assumes one receive.
  SendOp op;
  op.type = OpType::Send;
  op.internal = true;
  uint8_t* frame = takeSlot(op);
  const std::vector<uint8_t> hello = helloFrame(maxMessageSize, ledger_.spendForCreditFrame());
  std::memcpy(frame, hello.data(), hello.size());
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(frame), static_cast<uint32_t>(hello.size()), slotLkey_};
  return outlet_.submit(op);
}

int FramedSender::sendCopied(const SendOp& op, uint8_t* header) noexcept {
  // The usual case, a message with nothing ahead of it and the credits it needs: out at once, as
  // pump() would send it, without a trip through the line. Anything waiting (a frame that needs a
  // slot or a credit, a keepalive frame) keeps its place ahead of it: the line then.
  if (waiting_.empty() && !probeWaiting_ && !ledger_.replyOwed() && !stopped_ && ledger_.canSendMessage()) {
    ++sentStraightOut_;
    ledger_.setWaiting(false);
    bool answers = false;
    const uint16_t returned = spendCredit(op.type, answers);
    setFrameCredits(header, returned, false, answers);
    if (int rc = outlet_.submit(op); rc != 0) return rc;
    return maybeSendCreditFrame();
  }
  Pending pending;
  pending.op = op;
  pending.spendsCredit = true;
  pending.headerAt = header;
  return enqueue(std::move(pending));
}

int FramedSender::sendZeroCopy(const SendOp& op) noexcept {
  Pending pending;
  pending.op = op;
  pending.spendsCredit = op.type == OpType::Send || op.type == OpType::WriteWithImm;
  pending.zeroCopyHeader = op.type == OpType::Send;
  return enqueue(std::move(pending));
}

int FramedSender::sendControl(std::vector<uint8_t> frame) noexcept {
  Pending pending;
  pending.op.type = OpType::Send;
  pending.op.internal = true;
  pending.spendsCredit = true;
  pending.answer = frame.size() > 1 && (frame[1] == static_cast<uint8_t>(FrameType::RegionGrant) ||
                                        frame[1] == static_cast<uint8_t>(FrameType::RegionRefused));
  if (pending.answer) {
    if (answersWaiting_ >= maxWaitingAnswers_) return -ENOBUFS;
    ++answersWaiting_;
  }
  pending.control = std::move(frame);
  return enqueue(std::move(pending));
}

int FramedSender::sendKeepaliveProbe() noexcept {
  probeWaiting_ = true;
  return pump();
}

int FramedSender::enqueue(Pending pending) noexcept {
  waiting_.push_back(std::move(pending));
  return pump();
}

bool FramedSender::waitingForCredits() const noexcept {
  return !waiting_.empty() && waiting_.front().spendsCredit && !ledger_.canSendMessage();
}

int FramedSender::postProtocolFrame(const std::vector<uint8_t>& frame, SendOp& op) noexcept {
  op.type = OpType::Send;
  op.internal = true;
  uint8_t* slot = takeSlot(op);
  std::memcpy(slot, frame.data(), frame.size());
  const bool answers = ledger_.answersAsk();
  setFrameCredits(slot, ledger_.spendForCreditFrame(), false, answers);
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(slot), static_cast<uint32_t>(frame.size()), slotLkey_};
  return outlet_.submit(op);
}

int FramedSender::pumpLine() noexcept {
  // Keepalive first: a probe or reply has no order with the messages, and must go while they
  // wait for a peer that holds our earlier ones.
  ledger_.setWaiting(waitingForCredits());
  while ((probeWaiting_ || ledger_.replyOwed()) && ledger_.canSendProtocolFrame() && !freeSlots_.empty()) {
    const bool reply = ledger_.replyOwed();
    if (reply)
      ledger_.clearReply();
    else
      probeWaiting_ = false;
    if (reply) stats_.add(&ConnectionStats::keepaliveRepliesSent);
    SendOp op;
    const auto frame = keepaliveFrame(reply ? FrameType::KeepaliveReply : FrameType::KeepaliveProbe, 0);
    if (int rc = postProtocolFrame(frame, op); rc != 0) return rc;
  }
  while (!waiting_.empty()) {
    Pending& next = waiting_.front();
    if (next.spendsCredit && !ledger_.canSendMessage()) {
      if (!next.countedWait) {
        stats_.add(&ConnectionStats::creditWaits);
        next.countedWait = true;
        if (waitBegins_) waitBegins_();
      }
      break;
    }
    const bool needsSlot = next.zeroCopyHeader || !next.control.empty();
    if (needsSlot && freeSlots_.empty()) break;
    SendOp op = next.op;
    ledger_.setWaiting(false);  // this one goes
    bool answers = false;  // what spends no credit carries no header (a write or read)
    const uint16_t returned = next.spendsCredit ? spendCredit(op.type, answers) : 0;
    uint8_t* header = next.headerAt;
    if (needsSlot) {
      header = takeSlot(op);
      ibv_sge sge{reinterpret_cast<uintptr_t>(header), 0, slotLkey_};
      if (!next.control.empty()) {
        std::memcpy(header, next.control.data(), next.control.size());
        sge.length = static_cast<uint32_t>(next.control.size());
        op.sge = sge;
      } else {
        writeFrameHeader(header, FrameType::Data, 0, op.sge.length, 0);
        sge.length = Frame::kHeaderSize;
        op.header = sge;
      }
    }
    if (next.answer) --answersWaiting_;
    waiting_.pop_front();
    if (header != nullptr) setFrameCredits(header, returned, false, answers);
    if (int rc = outlet_.submit(op); rc != 0) return rc;
  }
  return maybeSendCreditFrame();
}

uint16_t FramedSender::spendCredit(OpType type, bool& answers) noexcept {
  answers = type != OpType::WriteWithImm && ledger_.answersAsk();
  ledger_.noteWaitOver();  // the next wait asks afresh
  ++creditsSpent_;
  if (type != OpType::WriteWithImm) return ledger_.spendForMessage();
  ledger_.spendForImmediate();  // no header to carry credits
  return 0;
}

int FramedSender::sendCreditFrameIfDue() noexcept {
  const bool lineWaits = waitingForCredits();
  ledger_.setWaiting(lineWaits);
  const bool ask = ledger_.shouldAsk(lineWaits);  // a line waiting for credits asks for them
  if (!ask && !ledger_.creditFrameDue()) return 0;
  SendOp op;
  op.type = OpType::Send;
  op.internal = true;
  uint8_t* frame = takeSlot(op);
  const bool answers = ledger_.answersAsk();
  const uint16_t returned = ledger_.spendForCreditFrame();
  writeFrameHeader(frame, FrameType::Credit, 0, 0, ask ? ledger_.askWords() : 0);  // once its credit is spent
  setFrameCredits(frame, returned, ask, answers);
  if (ask) ledger_.noteAsked();
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(frame), static_cast<uint32_t>(Frame::kHeaderSize), slotLkey_};
  stats_.add(&ConnectionStats::creditFramesSent);
  return outlet_.submit(op);
}

std::vector<SendOp> FramedSender::stop() noexcept {
  stopped_ = true;
  std::vector<SendOp> never;
  never.reserve(waiting_.size());
  for (size_t i = 0; i < waiting_.size(); ++i) never.push_back(waiting_[i].op);
  waiting_.clear();
  answersWaiting_ = 0;
  ledger_.clearReply();
  probeWaiting_ = false;
  return never;
}

}  // namespace evrdma::detail
