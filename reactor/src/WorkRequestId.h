// WorkRequestId: the one layout of every wr_id evrdma posts, shared by the completion dispatcher
// (which routes by serial), the send queue and the receive ring.
//   bit 63      1: a send-queue request (send, write, read), 0: a receive
//   bits 32..62 the serial of the QP's CQ attachment: a completion left behind by a destroyed QP
//               never reaches a newer QP that got the same qp_num
//   bits 0..31  the receive buffer slot, or the send queue's sequence number
#pragma once

#include <cstdint>

namespace evrdma::detail::wrid {

constexpr uint64_t kSendFlag = uint64_t{1} << 63;
constexpr unsigned kSerialShift = 32;
constexpr uint32_t kSerialMask = 0x7fffffff;  // serials run 1 .. kSerialMask

constexpr uint64_t receive(uint32_t serial, uint32_t slot) noexcept {
  return (uint64_t{serial & kSerialMask} << kSerialShift) | slot;
}
constexpr uint64_t send(uint32_t serial, uint32_t sequence) noexcept { return kSendFlag | receive(serial, sequence); }

constexpr bool isSend(uint64_t wrId) noexcept { return (wrId & kSendFlag) != 0; }
constexpr uint32_t serial(uint64_t wrId) noexcept { return static_cast<uint32_t>(wrId >> kSerialShift) & kSerialMask; }
// The receive slot or the send sequence number.
constexpr uint32_t index(uint64_t wrId) noexcept { return static_cast<uint32_t>(wrId); }

}  // namespace evrdma::detail::wrid
