// CmEvent: a copy of one rdma_cm_event, taken before the event is acked, so handlers may keep it,
// and may destroy the id it names (rdma_destroy_id waits for every event of the id to be acked).
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <vector>

namespace evrdma {

struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  rdma_cm_id* id = nullptr;        // for CONNECT_REQUEST: the new id of the incoming connection
  rdma_cm_id* listenId = nullptr;  // for CONNECT_REQUEST: the listening id
  int status = 0;                  // 0, -errno, or a transport reject/error code (see rdma_cm(7))
  // Private data as delivered. Its length is what the transport reports: InfiniBand and RoCE pad it
  // (a connect request always carries 56 bytes), so the application's own format must say how
  // much of it counts.
  std::vector<uint8_t> privateData;
  uint8_t responderResources = 0;  // connection parameters of CONNECT_REQUEST / ESTABLISHED
  uint8_t initiatorDepth = 0;
  uint32_t remoteQpNum = 0;

  const char* name() const noexcept { return rdma_event_str(type); }
};

// Receives the CM events of the ids whose context points at it. Called on the loop; must not throw.
class CmEventHandler {
 public:
  virtual void onCmEvent(const CmEvent& event) noexcept = 0;

 protected:
  ~CmEventHandler() = default;
};

}  // namespace evrdma
