// ReactorCore: a Reactor's base (borrowed or owned), deferred closures and their later turns,
// posts from other threads, the CM channel and devices made on first use, and the order in which
// it all goes when the Reactor is destroyed.
#include "ReactorCore.h"

#include <event2/event.h>
#include <rdma/rdma_cma.h>

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "AlignedTicks.h"
#include "AsyncEventRouter.h"
#include "CmDispatcher.h"
#include "ConnectGate.h"
#include "Device.h"
#include "DeviceUsers.h"
#include "Durations.h"
#include "Mailbox.h"
#include "MemoryAccount.h"
#include "NextTurn.h"
#include "ReactorMember.h"
#include "TurnQueue.h"

namespace evrdma {

ReactorCore::ReactorCore(Reactor& reactor, event_base* base, bool ownsBase)
    : reactor_(reactor),
      base_(base),
      ownsBase_(ownsBase),
      memory_(std::make_shared<detail::MemoryAccount>()),
      connectGate_(std::make_unique<detail::ConnectGate>(reactor)),
      deferLater_(std::make_unique<detail::NextTurn>()),
      teardowns_(std::make_unique<detail::TurnQueue>(Reactor::kTeardownsPerTurn)),
      ticks_(std::make_unique<detail::AlignedTicks>(kTicksPerTurn)) {
  makeDeferEvents();
}

const timeval* ReactorCore::commonPeriod(std::chrono::microseconds period) noexcept {
  for (const auto& [known, duration] : commonPeriods_)
    if (known == period) return duration;
  if (base_ == nullptr || commonPeriods_.size() >= kMostCommonPeriods) return nullptr;
  const timeval tv = detail::timevalOf(period);
  const timeval* duration = event_base_init_common_timeout(base_, &tv);
  if (duration != nullptr) commonPeriods_.emplace_back(period, duration);
  return duration;
}

void ReactorCore::makeDeferEvents() noexcept {
  if (base_ != nullptr) deferEvent_ = event_new(base_, -1, 0, &ReactorCore::onDeferEvent, this);
  if (deferEvent_ != nullptr &&
      (deferLater_->init(base_, &ReactorCore::onDeferEvent, this) != 0 || teardowns_->init(base_) != 0 ||
       ticks_->init(base_) != 0)) {
    event_free(deferEvent_);
    deferEvent_ = nullptr;  // valid() says so
  }
}

void ReactorCore::lingerStreams() noexcept {
  if (linger_.count() == 0 || members_.empty()) return;
  lingering_ = true;
  // Copied: a member may free another meanwhile (then it has left the set).
  const std::vector<detail::ReactorMember*> all(members_.begin(), members_.end());
  for (detail::ReactorMember* member : all)
    if (members_.count(member) != 0) member->beforeLinger();
  const auto deadline = std::chrono::steady_clock::now() + linger_;
  std::vector<pollfd> fds;
  while (anyMemberLingers()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    fds.clear();
    if (cm_ && cm_->fd() >= 0) fds.push_back(pollfd{cm_->fd(), POLLIN, 0});
    for (const auto& [context, device] : devices_)
      if (device->completionFd() >= 0) fds.push_back(pollfd{device->completionFd(), POLLIN, 0});
    if (fds.empty()) break;
    // Bounded at 10 ms: the CQs are polled each round whatever the fds say (a pass may have left
    // work for a later turn, which no event announces).
    // Not at all while CM events read ahead wait for their turn (the channel's fd does not say so).
    const long long wait = cm_ && cm_->backlogged() ? 0 : std::min<long long>(left.count(), 10);
    (void)::poll(fds.data(), fds.size(), static_cast<int>(wait));
    if (cm_) cm_->serveNow();
    for (const auto& [context, device] : devices_) device->serveCompletionsNow();
  }
  lingering_ = false;
}

bool ReactorCore::anyMemberLingers() const noexcept {
  for (const detail::ReactorMember* member : members_)
    if (member->lingering()) return true;
  return false;
}

void ReactorCore::shutDown() noexcept {
  lingerStreams();
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
  ticks_->discard();  // an orphan's tick, if any, is then inactive: its destructor touches nothing
  devices_.clear();
  cm_.reset();
}

ReactorCore::~ReactorCore() {
  if (deferEvent_ != nullptr) event_free(deferEvent_);
  // Their events go before the base they are on (freed below when it is ours).
  deferLater_.reset();
  teardowns_.reset();
  ticks_.reset();
  mailbox_.reset();
  if (ownsBase_ && base_ != nullptr) event_base_free(base_);
}

void ReactorCore::defer(std::function<void()> fn) {
  if (dying_) return;
  bool wasEmpty = deferred_.empty();
  deferred_.push_back(std::move(fn));
  // From any other callback, event_active runs the closures right after it. From a deferred
  // closure that would be no yield (libevent runs the event again in the same pass):
  // runDeferred schedules the next batch for a later turn instead.
  if (wasEmpty && !runningDeferred_) event_active(deferEvent_, EV_TIMEOUT, 0);
}

void ReactorCore::deferTeardown(std::function<void()> fn) {
  if (dying_) return;
  teardowns_->push(std::move(fn));
}

int ReactorCore::acceptPosts() noexcept {
  if (mailbox_) return 0;
  auto mailbox = std::make_unique<detail::Mailbox>();
  if (int rc = mailbox->init(base_); rc != 0) return rc;
  mailbox_ = std::move(mailbox);
  acceptsPosts_ = true;
  return 0;
}

int ReactorCore::post(std::function<void()> fn) {
  if (!acceptsPosts_) return -ENOTSUP;
  mailbox_->post(std::move(fn));
  return 0;
}

void ReactorCore::onDeferEvent(int, short, void* self) noexcept { static_cast<ReactorCore*>(self)->runDeferred(); }

void ReactorCore::runDeferred() noexcept {
  if (runningDeferred_ || deferred_.empty()) return;
  std::vector<std::function<void()>> batch;
  batch.swap(deferred_);
  runningDeferred_ = true;
  for (auto& fn : batch) fn();
  runningDeferred_ = false;
  if (!deferred_.empty() && !dying_) deferLater_->schedule();
}

CmDispatcher* ReactorCore::cm(int& error) {
  error = 0;
  if (!cm_) {
    auto dispatcher = std::make_unique<CmDispatcher>(reactor_);
    if ((error = dispatcher->init()) != 0) return nullptr;
    cm_ = std::move(dispatcher);
  }
  return cm_.get();
}

void ReactorCore::releaseDevice(ibv_context* device) noexcept {
  auto it = devices_.find(device);
  if (it != devices_.end() && it->second->removed()) devices_.erase(it);
}

void ReactorCore::deviceRemoved(ibv_context* device) noexcept {
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

Device* ReactorCore::device(ibv_context* context, int& error) {
  error = 0;
  auto& slot = devices_[context];
  if (!slot) {
    auto device = std::make_unique<Device>(reactor_, context, completionStats_.emplace_back());
    if ((error = device->init()) != 0) {
      devices_.erase(context);
      return nullptr;
    }
    slot = std::move(device);
  }
  return slot.get();
}

}  // namespace evrdma
