// CmDispatcher: reading the CM channel a budget at a time, acking each event before it is
// dispatched by id->context.
#include "CmDispatcher.h"

#include <event2/event.h>

#include <cerrno>

#include "Logging.h"
#include "ReactorCore.h"
#include "evrdma/Reactor.h"

namespace evrdma {

CmDispatcher::~CmDispatcher() {
  if (event_ != nullptr) event_free(event_);
}

int CmDispatcher::init() noexcept {
  errno = 0;
  channel_.reset(rdma_create_event_channel());
  if (!channel_) return errno ? -errno : -ENODEV;
  if (int rc = setNonBlocking(channel_->fd); rc != 0) return rc;
  event_ = event_new(reactor_.base(), channel_->fd, EV_READ | EV_PERSIST, &CmDispatcher::onReadable, this);
  if (event_ == nullptr || event_add(event_, nullptr) != 0) return -ENOMEM;
  return resume_.init(reactor_.base(), &CmDispatcher::onReadable, this);
}

int CmDispatcher::createId(CmEventHandler* handler, rdma_port_space space, CmId& id) noexcept {
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(channel_.get(), &raw, handler, space) != 0) return errno ? -errno : -ENOMEM;
  id.reset(raw);
  return 0;
}

void CmDispatcher::onReadable(int, short, void* self) noexcept { static_cast<CmDispatcher*>(self)->drain(); }

void CmDispatcher::drain() noexcept {
  for (int taken = 0; taken < kBudget; ++taken) {
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(channel_.get(), &raw) != 0) return;  // EAGAIN: drained (errors: retried on readiness)
    CmEvent event;
    event.type = raw->event;
    event.id = raw->id;
    event.listenId = raw->listen_id;
    event.status = raw->status;
    // Connection parameters are only meaningful for connected port spaces (RC/UC).
    if (raw->id != nullptr && raw->id->ps == RDMA_PS_TCP) {
      const rdma_conn_param& conn = raw->param.conn;
      if (conn.private_data != nullptr && conn.private_data_len > 0) {
        auto* bytes = static_cast<const uint8_t*>(conn.private_data);
        event.privateData.assign(bytes, bytes + conn.private_data_len);
      }
      event.responderResources = conn.responder_resources;
      event.initiatorDepth = conn.initiator_depth;
      event.remoteQpNum = conn.qp_num;
    }
    rdma_ack_cm_event(raw);  // ack first: the handler may destroy the id
    // Whoever's id it is, the device's completion channel, CQs and PD must go too.
    if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL && event.id != nullptr && event.id->verbs != nullptr)
      coreOf(reactor_).deviceRemoved(event.id->verbs);
    auto* handler = event.id != nullptr ? static_cast<CmEventHandler*>(event.id->context) : nullptr;
    if (handler == nullptr) {
      ++orphans_;
      EVRDMA_LOG(LogLevel::Info, "CM event %s (status %d) for an id nobody owns any more: dropped",
                 rdma_event_str(event.type), event.status);
      continue;
    }
    ++dispatched_;
    handler->onCmEvent(event);
  }
  ++budgetYields_;
  EVRDMA_LOG(LogLevel::Debug, "CM events: budget of one turn spent, the rest on a later turn");
  resume_.schedule();  // budget spent: the rest after the loop's other sources and timers
}

}  // namespace evrdma
