// CmDispatcher: reading the CM channel ahead (each event acked as it is copied), dispatching a
// budget a turn by id->context; the process's dispatchers, so that destroying an id forgets its
// waiting events.
#include "CmDispatcher.h"

#include <event2/event.h>

#include <cerrno>
#include <mutex>
#include <utility>

#include "Logging.h"
#include "ReactorCore.h"
#include "evrdma/Reactor.h"

namespace evrdma {

namespace {
// Trivially destroyed, so a dispatcher outliving static destruction still finds them.
std::mutex registryMutex;
CmDispatcher* registryHead = nullptr;
}  // namespace

CmDispatcher::~CmDispatcher() {
  if (event_ != nullptr) event_free(event_);
  std::lock_guard<std::mutex> lock(registryMutex);
  for (CmDispatcher** link = &registryHead; *link != nullptr; link = &(*link)->nextRegistered_) {
    if (*link != this) continue;
    *link = nextRegistered_;
    break;
  }
}

int CmDispatcher::init() noexcept {
  errno = 0;
  channel_.reset(rdma_create_event_channel());
  if (!channel_) return errno ? -errno : -ENODEV;
  if (int rc = setNonBlocking(channel_->fd); rc != 0) return rc;
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    nextRegistered_ = registryHead;
    registryHead = this;
  }
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
  const bool channelLeft = readAhead();
  CmEvent event;
  for (int taken = 0; taken < kBudget && waiting_.pop(event); ++taken) dispatch(event);
  if (!channelLeft && waiting_.size() == 0) return;
  ++budgetYields_;
  EVRDMA_LOG(LogLevel::Debug, "CM events: budget of one turn spent, the rest on a later turn");
  resume_.schedule();  // the rest after the loop's other sources and timers
}

bool CmDispatcher::readAhead() noexcept {
  for (int read = 0; read < kReadAhead; ++read) {
    if (waiting_.size() >= kMostWaiting) return true;
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(channel_.get(), &raw) != 0) return false;  // EAGAIN: drained (errors: retried on readiness)
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
    // Whether anyone here owns the id is read before the ack: once acked, an id handed to another
    // Reactor (its context cleared here first) may be migrated and destroyed there at any moment.
    const bool owned = event.id != nullptr && event.id->context != nullptr;
    ibv_context* removed = event.type == RDMA_CM_EVENT_DEVICE_REMOVAL && event.id != nullptr ? event.id->verbs : nullptr;
    rdma_ack_cm_event(raw);  // ack first: the handler may destroy the id
    if (owned) {
      waiting_.push(std::move(event));
      continue;
    }
    if (removed != nullptr) coreOf(reactor_).deviceRemoved(removed);
    dropOrphan(event);
  }
  return true;
}

void CmDispatcher::dispatch(CmEvent& event) noexcept {
  // An id's waiting events are forgotten before it is destroyed or handed away: event.id is ours
  // and alive, or null.
  auto* handler = event.id != nullptr ? static_cast<CmEventHandler*>(event.id->context) : nullptr;
  // Whoever's id it is, the device's completion channel, CQs and PD must go too.
  if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL && event.id != nullptr && event.id->verbs != nullptr)
    coreOf(reactor_).deviceRemoved(event.id->verbs);
  if (handler == nullptr) return dropOrphan(event);
  ++dispatched_;
  handler->onCmEvent(event);
}

void CmDispatcher::dropOrphan(const CmEvent& event) noexcept {
  ++orphans_;
  EVRDMA_LOG(LogLevel::Info, "CM event %s (status %d) for an id nobody owns any more: dropped",
             rdma_event_str(event.type), event.status);
}

std::vector<rdma_cm_id*> CmDispatcher::forgetWaitingEventsOf(rdma_cm_id* id) noexcept {
  std::vector<rdma_cm_id*> requestIds;
  if (id == nullptr || id->channel == nullptr) return requestIds;
  std::lock_guard<std::mutex> lock(registryMutex);  // the dispatcher cannot go while it is held
  for (CmDispatcher* cm = registryHead; cm != nullptr; cm = cm->nextRegistered_) {
    if (cm->channel() != id->channel) continue;
    (void)cm->waiting_.forget(id, requestIds);
    break;
  }
  return requestIds;
}

namespace detail {

int destroyCmId(rdma_cm_id* id) noexcept {
  for (rdma_cm_id* request : CmDispatcher::forgetWaitingEventsOf(id)) (void)destroyCmId(request);
  return rdma_destroy_id(id);
}

}  // namespace detail

}  // namespace evrdma
