// HeldMessages: what arrived while a connection's receiving was paused (Connection::
// pauseReceiving), in arrival order, each still in its receive buffer: enough to deliver it later
// as if it had just completed. At most recvDepth of them (each holds a receive).
#pragma once

#include <cstdint>

#include "Ring.h"

namespace evrdma::detail {

struct HeldMessage {
  uint32_t slot = 0;      // the receive buffer
  uint32_t length = 0;    // bytes received (a write with immediate: bytes written into the region)
  uint32_t imm = 0;       // immediate data, host order
  bool hasImm = false;
  bool intoBuffer = true;  // false: an RDMA write with immediate (no bytes in the buffer)
};

class HeldMessages : public Ring<HeldMessage> {};

}  // namespace evrdma::detail
