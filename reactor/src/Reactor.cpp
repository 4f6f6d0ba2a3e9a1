// Reactor: its event_base (borrowed or owned), run and stop, deferred closures, posts from other
// threads, the memory budget and the stats snapshot.
#include "evrdma/Reactor.h"

#include <event2/event.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <utility>

#include "CmDispatcher.h"
#include "AsyncEventRouter.h"
#include "Device.h"
#include "DeviceUsers.h"
#include "ConnectGate.h"
#include "Logging.h"
#include "Mailbox.h"
#include "MemoryAccount.h"
#include "NextTurn.h"
#include "TurnQueue.h"
#include "ReactorMember.h"

namespace evrdma {

Reactor::Reactor()
    : base_(event_base_new()),
      ownsBase_(true),
      memory_(std::make_shared<detail::MemoryAccount>()),
      connectGate_(std::make_unique<detail::ConnectGate>(*this)),
      deferLater_(std::make_unique<detail::NextTurn>()),
      teardowns_(std::make_unique<detail::TurnQueue>(kTeardownsPerTurn)) {
  makeDeferEvents();
}

Reactor::Reactor(event_base* borrowed)
    : base_(borrowed),
      ownsBase_(false),
      memory_(std::make_shared<detail::MemoryAccount>()),
      connectGate_(std::make_unique<detail::ConnectGate>(*this)),
      deferLater_(std::make_unique<detail::NextTurn>()),
      teardowns_(std::make_unique<detail::TurnQueue>(kTeardownsPerTurn)) {
  makeDeferEvents();
}

void Reactor::makeDeferEvents() noexcept {
  if (base_ != nullptr) deferEvent_ = event_new(base_, -1, 0, &Reactor::onDeferEvent, this);
  if (deferEvent_ != nullptr &&
      (deferLater_->init(base_, &Reactor::onDeferEvent, this) != 0 || teardowns_->init(base_) != 0)) {
    event_free(deferEvent_);
    deferEvent_ = nullptr;  // valid() says so
  }
}

Reactor::~Reactor() {
  dying_ = true;
  if (mailbox_) mailbox_->discard();
  deferred_.clear();  // destroyed unrun: nothing of the application's is called from here
  teardowns_->discard();
  // Each member lets go of the Reactor; one may free others (a Listener its Agents) meanwhile.
  while (!members_.empty()) {
    detail::ReactorMember* member = *members_.begin();
    members_.erase(members_.begin());
    member->onReactorGone();
  }
  deferred_.clear();
  deferLater_->cancel();
  teardowns_->discard();
  devices_.clear();
  cm_.reset();
  if (deferEvent_ != nullptr) event_free(deferEvent_);
  // Their events go before the base they are on (freed below when it is ours).
  deferLater_.reset();
  teardowns_.reset();
  mailbox_.reset();
  if (ownsBase_ && base_ != nullptr) event_base_free(base_);
}

int Reactor::run() noexcept { return event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY) < 0 ? -1 : 0; }

void Reactor::stop() noexcept { event_base_loopbreak(base_); }

void Reactor::defer(std::function<void()> fn) {
  if (dying_) return;
  bool wasEmpty = deferred_.empty();
  deferred_.push_back(std::move(fn));
  // From any other callback, event_active runs the closures right after it. From a deferred
  // closure that would be no yield (libevent runs the event again in the same pass):
  // runDeferred schedules the next batch for a later turn instead.
  if (wasEmpty && !runningDeferred_) event_active(deferEvent_, EV_TIMEOUT, 0);
}

void Reactor::deferTeardown(std::function<void()> fn) {
  if (dying_) return;
  teardowns_->push(std::move(fn));
}

int Reactor::acceptPosts() noexcept {
  if (mailbox_) return 0;
  auto mailbox = std::make_unique<detail::Mailbox>();
  if (int rc = mailbox->init(base_); rc != 0) return rc;
  mailbox_ = std::move(mailbox);
  acceptsPosts_ = true;
  return 0;
}

int Reactor::post(std::function<void()> fn) {
  if (!acceptsPosts_) return -ENOTSUP;
  mailbox_->post(std::move(fn));
  return 0;
}

void Reactor::onDeferEvent(int, short, void* self) noexcept { static_cast<Reactor*>(self)->runDeferred(); }

void Reactor::runDeferred() noexcept {
  if (runningDeferred_ || deferred_.empty()) return;
  std::vector<std::function<void()>> batch;
  batch.swap(deferred_);
  runningDeferred_ = true;
  for (auto& fn : batch) fn();
  runningDeferred_ = false;
  if (!deferred_.empty() && !dying_) deferLater_->schedule();
}

void Reactor::setMemoryBudget(uint64_t bytes) noexcept { memory_->setBudget(bytes); }
uint64_t Reactor::memoryBudget() const noexcept { return memory_->budget(); }
uint64_t Reactor::registeredMemory() const noexcept { return memory_->registered(); }

int Reactor::chargeMemory(uint64_t bytes, MemoryCharge& out) noexcept { return memory_->charge(bytes, out); }
void Reactor::setMaxConnectsInFlight(uint32_t limit) noexcept { connectGate_->setLimit(limit); }
uint32_t Reactor::maxConnectsInFlight() const noexcept { return connectGate_->limit(); }
uint32_t Reactor::connectsInFlight() const noexcept { return connectGate_->inFlight(); }
size_t Reactor::connectsWaiting() const noexcept { return connectGate_->waiting(); }

SharedReceiveStats Reactor::sharedReceiveStats() const noexcept {
  SharedReceiveStats out;
  for (const auto& [context, device] : devices_) device->addSharedReceiveStats(out);
  return out;
}

ReactorStats Reactor::stats() const {
  ReactorStats out;
  out.cmEvents = cmEventStats();
  for (const auto& [context, device] : devices_) {
    out.devices.push_back(DeviceStats{device->name(), device->stats(), readRnrCounters(context)});
    device->addSharedReceiveStats(out.sharedReceives);
  }
  for (const detail::ReactorMember* member : members_) {
    ConnectionState state;
    if (member->connectionState(state)) ++out.connections[state];
  }
  out.registeredMemory = registeredMemory();
  out.memoryBudget = memoryBudget();
  out.connectsInFlight = connectsInFlight();
  out.connectsWaiting = connectsWaiting();
  return out;
}

CmEventStats Reactor::cmEventStats() const noexcept {
  CmEventStats out;
  if (cm_) {
    out.dispatched = cm_->eventsDispatched();
    out.withoutHandler = cm_->eventsWithoutHandler();
    out.budgetYields = cm_->budgetYields();
  }
  return out;
}

CmDispatcher* Reactor::cm(int& error) {
  error = 0;
  if (!cm_) {
    auto dispatcher = std::make_unique<CmDispatcher>(*this);
    if ((error = dispatcher->init()) != 0) return nullptr;
    cm_ = std::move(dispatcher);
  }
  return cm_.get();
}

void Reactor::releaseDevice(ibv_context* device) noexcept {
  auto it = devices_.find(device);
  if (it != devices_.end() && it->second->removed()) devices_.erase(it);
}

void Reactor::deviceRemoved(ibv_context* device) noexcept {
  // Marked now, on this thread: other Reactors hear of it later, and until they let go of the
  // device librdmacm must not close it (see DeviceUsers).
  detail::DeviceUsers::instance().markRemoved(device);
  if (auto it = devices_.find(device); it != devices_.end()) {
    it->second->markRemoved();  // tells the other Reactors on the device too
    return;
  }
  // Nothing of ours on it (a listening Reactor whose agents live on workers), but other Reactors
  // may hold CQs, a channel and a PD there with no CM id to tell them: the removal waits for them.
  detail::AsyncEventRouter::instance().announceRemoval(device, nullptr);
  // After the handler (it destroys its id), unless a Reactor holding the device does it later.
  defer([] { detail::DeviceUsers::instance().forgetRemovedIfUnheld(); });
}

Device* Reactor::device(ibv_context* context, int& error) {
  error = 0;
  auto& slot = devices_[context];
  if (!slot) {
    auto device = std::make_unique<Device>(*this, context, completionStats_.emplace_back());
    if ((error = device->init()) != 0) {
      devices_.erase(context);
      return nullptr;
    }
    slot = std::move(device);
  }
  return slot.get();
}

}  // namespace evrdma
