// Device: a device's protection domain, buffer arena, shared receive queues, async events and
// removal, for one Reactor; its completions go through its CompletionDispatcher.
#include "Device.h"

#include <event2/event.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "DeviceUsers.h"
#include "Logging.h"
#include "RegisteredHeap.h"
#include "ReactorCore.h"
#include "evrdma/Reactor.h"

namespace evrdma {

Device::Device(Reactor& reactor, ibv_context* context, CompletionStats& stats)
    : reactor_(reactor), context_(context), stats_(stats) {}

Device::~Device() { releaseVerbs(); }

const char* Device::name() const noexcept { return CompletionDispatcher::nameOf(context_); }

int Device::init() noexcept {
  detail::DeviceUsers::instance().hold(context_);
  holdsDevice_ = true;
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(context_, &attr); rc != 0) return -rc;
  maxSrqWr_ = attr.max_srq > 0 && attr.max_srq_wr > 0 ? static_cast<uint32_t>(attr.max_srq_wr) : 0;
  errno = 0;
  pd_.reset(ibv_alloc_pd(context_));
  if (!pd_) return errno ? -errno : -ENOMEM;
  completions_ = std::make_unique<CompletionDispatcher>(reactor_.base(), coreOf(reactor_).pollingSettings(), context_,
                                                        attr.max_cqe, stats_,
                                                        static_cast<detail::AsyncInbox&>(*this),
                                                        static_cast<CompletionDispatcher::Owner&>(*this));
  if (int rc = completions_->init(); rc != 0) return rc;
  // Errors that no completion reports (a QP that went fatal, e.g. an iWARP peer's TERMINATE) come
  // as async events of the device.
  if (int rc = setNonBlocking(context_->async_fd); rc != 0) return rc;
  asyncEvent_ = event_new(reactor_.base(), context_->async_fd, EV_READ | EV_PERSIST, &Device::onAsyncReadable, this);
  if (asyncEvent_ == nullptr || event_add(asyncEvent_, nullptr) != 0) return -ENOMEM;
  inboxFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inboxFd_ < 0) return -errno;
  inboxEvent_ = event_new(reactor_.base(), inboxFd_, EV_READ | EV_PERSIST, &Device::onInboxReadable, this);
  if (inboxEvent_ == nullptr || event_add(inboxEvent_, nullptr) != 0) return -ENOMEM;
  detail::AsyncEventRouter::instance().addInbox(context_, this);
  return 0;
}

ibv_pd* Device::makeOwnDomain(int& error) noexcept {
  retireDomain(nullptr);  // frees those whose memory has gone since
  if (removed_) {
    error = -ENODEV;
    return nullptr;
  }
  errno = 0;
  ibv_pd* pd = ibv_alloc_pd(context_);
  if (pd == nullptr) error = errno ? -errno : -ENOMEM;
  return pd;
}

void Device::retireDomain(ibv_pd* pd) noexcept {
  if (pd != nullptr) retiredDomains_.push_back(pd);
  // EBUSY while a memory region is still registered on it: kept for a later try.
  retiredDomains_.erase(std::remove_if(retiredDomains_.begin(), retiredDomains_.end(),
                                       [](ibv_pd* retired) {
                                         // The heap's slabs registered on it go first.
                                         if (detail::RegisteredHeap::installed())
                                           detail::RegisteredHeap::instance()->forget(retired);
                                         return ibv_dealloc_pd(retired) == 0;
                                       }),
                        retiredDomains_.end());
}

detail::SmallBufferArena& Device::smallBuffers() {
  if (!smallBuffers_) smallBuffers_ = std::make_unique<detail::SmallBufferArena>(pd_.get(), &memoryAccount());
  return *smallBuffers_;
}

detail::MemoryAccount& Device::memoryAccount() noexcept { return coreOf(reactor_).memoryAccount(); }

std::unique_ptr<CompletionDispatcher::Attachment> Device::attach(uint32_t entries, CompletionHandler* handler,
                                                                 int& error) {
  if (removed_ || !completions_) {
    error = -ENODEV;
    return nullptr;
  }
  return completions_->attach(entries, handler, error);
}

detail::SharedReceiveQueue* Device::sharedReceiveQueue(size_t bufferSize, detail::SharedReceiveQueue::Seat seat,
                                                       int& error) {
  error = 0;
  if (removed_ || !completions_) {
    error = -ENODEV;
    return nullptr;
  }
  if (maxSrqWr_ == 0) {
    error = -EOPNOTSUPP;
    return nullptr;
  }
  // Newest first: the queues before it were full when it was made (and thousands of agents take
  // dozens of queues).
  for (auto it = srqs_.rbegin(); it != srqs_.rend(); ++it)
    if ((*it)->bufferSize() == bufferSize && (*it)->hasRoomFor(seat)) return it->get();
  auto srq = std::make_unique<detail::SharedReceiveQueue>(pd_.get(), smallBuffers(), memoryAccount(), bufferSize,
                                                          completions_->takeSerial());
  const bool iwarp = isIwarp(context_);
  const uint32_t capacity = iwarp ? detail::SharedReceiveQueue::kMaxCapacityIwarp : detail::SharedReceiveQueue::kMaxCapacity;
  if ((error = srq->init(std::min(maxSrqWr_, capacity))) != 0) return nullptr;
  if (!srq->hasRoomFor(seat)) {
    error = -ENOSPC;
    return nullptr;
  }
  detail::AsyncEventRouter::instance().ownSrq(srq->get(), this);
  completions_->routeReceivesOf(srq.get());  // its completions carry its serial, as an attachment's do
  srqs_.push_back(std::move(srq));
  return srqs_.back().get();
}

void Device::addSharedReceiveStats(SharedReceiveStats& stats) const noexcept {
  for (const auto& srq : srqs_) srq->addTo(stats);
}

void Device::markRemoved() noexcept {
  if (removed_) return;
  removed_ = true;
  detail::DeviceUsers::instance().markRemoved(context_);
  EVRDMA_LOG(LogLevel::Info, "%s: the device is going away: its connections fail, and its CQs, channel and PD go "
             "once none uses them", name());
  // Every other Reactor on the device must let go of it too, also one with no CM id on it that
  // would tell it (a worker whose agents have all closed keeps its CQs, channel and PD): the
  // removal waits for them. Each hears it in its own loop.
  detail::AsyncEventRouter::instance().announceRemoval(context_, this);
  if (completions_) completions_->stop();  // every connection hears onDeviceRemoved, and detaches later
  if (asyncEvent_ != nullptr) event_del(asyncEvent_);
  releaseIfUnused();
}

void Device::releaseIfUnused() noexcept {
  if (!removed_ || (completions_ && completions_->attachments() > 0) || releaseScheduled_ || coreOf(reactor_).dying()) return;
  releaseScheduled_ = true;
  // Now, before the last id on the device goes: librdmacm closes the device's context then, and
  // CQs, channel and PD left on a closed context could no longer be destroyed (the removal would
  // wait for them forever). Not while completions are being handed out (a deferred call then).
  if (completions_ && completions_->delivering()) {
    reactor_.defer([this] { releaseVerbs(); });
  } else {
    releaseVerbs();
  }
  // The empty Device itself goes on a later turn.
  Reactor& reactor = reactor_;
  ibv_context* context = context_;
  reactor.defer([&reactor, context] { coreOf(reactor).releaseDevice(context); });
}

void Device::releaseVerbs() noexcept {
  if (removed_) EVRDMA_LOG(LogLevel::Debug, "%s: releasing the removed device's CQs, channel and PD", name());
  detail::AsyncEventRouter::instance().removeInbox(this);  // no other thread posts to us from here on
  if (inboxEvent_ != nullptr) event_free(inboxEvent_);
  inboxEvent_ = nullptr;
  if (inboxFd_ >= 0) close(inboxFd_);
  inboxFd_ = -1;
  if (asyncEvent_ != nullptr) event_free(asyncEvent_);
  asyncEvent_ = nullptr;
  if (completions_) completions_->forgetSharedReceiveQueues();
  srqs_.clear();  // every QP that received through them is gone
  if (completions_) completions_->releaseVerbs();  // its CQs (each acks its events first), then its channel
  smallBuffers_.reset();  // every connection on the device is gone: no block is leased
  retireDomain(nullptr);
  if (!retiredDomains_.empty())
    EVRDMA_LOG(LogLevel::Warn, "%s: %zu protection domains of connections still have memory registered on them",
               name(), retiredDomains_.size());
  retiredDomains_.clear();
  pd_.reset();
  if (holdsDevice_) detail::DeviceUsers::instance().release(context_);  // last, once nothing is left on it
  holdsDevice_ = false;
}

void Device::post(const detail::AsyncEventCopy& event) noexcept {
  {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    inbox_.push_back(event);
  }
  const uint64_t one = 1;
  ssize_t written = write(inboxFd_, &one, sizeof one);  // EAGAIN: the counter is full, a wake-up is due anyway
  (void)written;
}

void Device::onInboxReadable(int fd, short, void* self) noexcept {
  uint64_t count = 0;
  ssize_t got = read(fd, &count, sizeof count);
  (void)got;
  auto* device = static_cast<Device*>(self);
  std::vector<detail::AsyncEventCopy> events;
  {
    std::lock_guard<std::mutex> lock(device->inboxMutex_);
    events.swap(device->inbox_);
  }
  for (const auto& event : events) device->handleAsync(event);
}

void Device::onAsyncReadable(int, short, void* self) noexcept { static_cast<Device*>(self)->drainAsyncEvents(); }

void Device::drainAsyncEvents() noexcept {
  ibv_async_event event{};
  for (;;) {
    if (ibv_get_async_event(context_, &event) != 0) {
      if (errno != EAGAIN && errno != EINTR) markRemoved();  // the device is gone: the fd stays in error
      return;
    }
    ++stats_.asyncEvents;
    EVRDMA_LOG(LogLevel::Info, "%s: device async event %s", name(), ibv_event_type_str(event.event_type));
    // Copy what is needed, then ack: destroying a QP or CQ waits for its events to be acked.
    detail::AsyncEventCopy copy;
    copy.type = event.event_type;
    switch (copy.type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        copy.qpNum = event.element.qp->qp_num;
        break;
      case IBV_EVENT_CQ_ERR:
        copy.cq = event.element.cq;
        break;
      case IBV_EVENT_SRQ_LIMIT_REACHED:
      case IBV_EVENT_SRQ_ERR:
        copy.srq = event.element.srq;
        break;
      default:
        break;
    }
    ibv_ack_async_event(&event);
    // Another Reactor's QP or CQ: it goes to that Reactor (device-wide events go to all).
    if (!detail::AsyncEventRouter::instance().forward(context_, this, copy)) handleAsync(copy);
  }
}

void Device::handleAsync(const detail::AsyncEventCopy& event) noexcept {
  if (!completions_) return;
  std::vector<CompletionHandler*> targets;
  switch (event.type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      if (CompletionHandler* handler = completions_->handlerOfQp(event.qpNum)) targets.push_back(handler);
      break;
    case IBV_EVENT_CQ_ERR:
      targets = completions_->handlersOfCq(event.cq);
      break;
    case IBV_EVENT_DEVICE_FATAL:
      markRemoved();  // tells every connection on the device
      return;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      for (auto& srq : srqs_)
        if (srq->get() == event.srq) srq->onLowWatermark();
      return;
    case IBV_EVENT_SRQ_ERR:  // the SRQ is lost: so is every connection receiving through it
      targets = completions_->handlersReceivingThrough(event.srq);
      break;
    default:
      return;  // informational (port up/down, COMM_EST, LAST_WQE_REACHED, ...): the CM reports what matters
  }
  for (CompletionHandler* handler : targets) handler->onAsyncError(event.type);
}

}  // namespace evrdma
