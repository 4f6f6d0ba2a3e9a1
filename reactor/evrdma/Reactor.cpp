#include "evrdma/Reactor.h"

#include <event2/event.h>

#include <cerrno>
#include <utility>

#include "evrdma/CmDispatcher.h"
#include "evrdma/CompletionDispatcher.h"

namespace evrdma {

Reactor::Reactor() : base_(event_base_new()), ownsBase_(true) {
  if (base_ != nullptr) deferEvent_ = event_new(base_, -1, 0, &Reactor::onDeferEvent, this);
}

Reactor::Reactor(event_base* borrowed) : base_(borrowed), ownsBase_(false) {
  if (base_ != nullptr) deferEvent_ = event_new(base_, -1, 0, &Reactor::onDeferEvent, this);
}

Reactor::~Reactor() {
  // Whatever was deferred still runs (it may free connections), including what it defers in turn.
  for (int rounds = 0; !deferred_.empty() && rounds < 1000; ++rounds) runDeferred();
  completions_.clear();
  cm_.reset();
  if (deferEvent_ != nullptr) event_free(deferEvent_);
  if (ownsBase_ && base_ != nullptr) event_base_free(base_);
}

int Reactor::run() noexcept { return event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY) < 0 ? -1 : 0; }

void Reactor::stop() noexcept { event_base_loopbreak(base_); }

void Reactor::defer(std::function<void()> fn) {
  bool wasEmpty = deferred_.empty();
  deferred_.push_back(std::move(fn));
  if (wasEmpty) event_active(deferEvent_, EV_TIMEOUT, 0);
}

void Reactor::onDeferEvent(int, short, void* self) noexcept { static_cast<Reactor*>(self)->runDeferred(); }

void Reactor::runDeferred() noexcept {
  // Functions deferred by these functions run in a later round, after other events had a turn.
  std::vector<std::function<void()>> batch;
  batch.swap(deferred_);
  for (auto& fn : batch) fn();
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

CompletionDispatcher* Reactor::completions(ibv_context* device, int& error) {
  error = 0;
  auto& slot = completions_[device];
  if (!slot) {
    auto dispatcher = std::make_unique<CompletionDispatcher>(*this, device);
    if ((error = dispatcher->init()) != 0) {
      completions_.erase(device);
      return nullptr;
    }
    slot = std::move(dispatcher);
  }
  return slot.get();
}

}  // namespace evrdma
