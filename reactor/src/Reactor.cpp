// Reactor: its API over its ReactorCore (run and stop, deferred closures, posts, polling, the
// memory budget, connects in flight) and the stats snapshot.
#include "evrdma/Reactor.h"

#include <event2/event.h>

#include <algorithm>

#include "CmDispatcher.h"
#include "ConnectGate.h"
#include "Device.h"
#include "MemoryAccount.h"
#include "ReactorCore.h"
#include "ReactorMember.h"

namespace evrdma {

Reactor::Reactor() : core_(std::make_unique<ReactorCore>(*this, event_base_new(), true)) {}

Reactor::Reactor(event_base* borrowed) : core_(std::make_unique<ReactorCore>(*this, borrowed, false)) {}

Reactor::~Reactor() { core_->shutDown(); }

bool Reactor::valid() const noexcept { return core_->valid(); }
event_base* Reactor::base() const noexcept { return core_->base(); }
bool Reactor::ownsBase() const noexcept { return core_->ownsBase(); }

int Reactor::run() noexcept { return event_base_loop(core_->base(), EVLOOP_NO_EXIT_ON_EMPTY) < 0 ? -1 : 0; }
void Reactor::stop() noexcept { event_base_loopbreak(core_->base()); }

void Reactor::defer(std::function<void()> fn) { core_->defer(std::move(fn)); }
int Reactor::acceptPosts() noexcept { return core_->acceptPosts(); }
bool Reactor::acceptsPosts() const noexcept { return core_->acceptsPosts(); }
int Reactor::post(std::function<void()> fn) { return core_->post(std::move(fn)); }

void Reactor::setPollingWindow(std::chrono::microseconds window) noexcept { core_->setPollingWindow(window); }
std::chrono::microseconds Reactor::pollingWindow() const noexcept { return core_->pollingWindow(); }
void Reactor::setPollingStretch(std::chrono::microseconds most) noexcept {
  core_->setPollingStretch(std::max(most, std::chrono::microseconds(0)));
}
std::chrono::microseconds Reactor::pollingStretch() const noexcept { return core_->pollingStretch(); }
void Reactor::setTurnBudget(std::chrono::microseconds budget) noexcept {
  core_->setTurnBudget(std::max(budget, std::chrono::microseconds(0)));
}
std::chrono::microseconds Reactor::turnBudget() const noexcept { return core_->turnBudget(); }
void Reactor::setLinger(std::chrono::milliseconds linger) noexcept {
  core_->setLinger(std::max(linger, std::chrono::milliseconds(0)));
}
std::chrono::milliseconds Reactor::linger() const noexcept { return core_->linger(); }

void Reactor::setMemoryBudget(uint64_t bytes) noexcept { core_->memoryAccount().setBudget(bytes); }
uint64_t Reactor::memoryBudget() const noexcept { return core_->memoryAccount().budget(); }
uint64_t Reactor::registeredMemory() const noexcept { return core_->memoryAccount().registered(); }
int Reactor::chargeMemory(uint64_t bytes, MemoryCharge& out) noexcept {
  return core_->memoryAccount().charge(bytes, out);
}

void Reactor::setMaxConnectsInFlight(uint32_t limit) noexcept { core_->connectGate().setLimit(limit); }
uint32_t Reactor::maxConnectsInFlight() const noexcept { return core_->connectGate().limit(); }
uint32_t Reactor::connectsInFlight() const noexcept { return core_->connectGate().inFlight(); }
size_t Reactor::connectsWaiting() const noexcept { return core_->connectGate().waiting(); }

SharedReceiveStats Reactor::sharedReceiveStats() const noexcept {
  SharedReceiveStats out;
  for (const auto& [context, device] : core_->devices()) device->addSharedReceiveStats(out);
  return out;
}

ReactorStats Reactor::stats() const {
  ReactorStats out;
  out.cmEvents = cmEventStats();
  for (const auto& [context, device] : core_->devices()) {
    out.devices.push_back(DeviceStats{device->name(), device->stats(), readRnrCounters(context)});
    device->addSharedReceiveStats(out.sharedReceives);
  }
  out.connections = core_->connectionCounts();
  out.registeredMemory = registeredMemory();
  out.memoryBudget = memoryBudget();
  out.connectsInFlight = connectsInFlight();
  out.connectsWaiting = connectsWaiting();
  return out;
}

CmEventStats Reactor::cmEventStats() const noexcept {
  CmEventStats out;
  if (const CmDispatcher* cm = core_->cmIfMade()) {
    out.dispatched = cm->eventsDispatched();
    out.withoutHandler = cm->eventsWithoutHandler();
    out.budgetYields = cm->budgetYields();
    out.waiting = cm->eventsWaiting();
    out.mostWaiting = cm->mostEventsWaiting();
  }
  return out;
}

}  // namespace evrdma
