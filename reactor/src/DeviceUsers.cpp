// DeviceUsers: the process-wide holds on each verbs context, under a mutex, and removed devices
// forgotten once no Reactor holds them.
#include "DeviceUsers.h"

#include <rdma/rdma_cma.h>

#include "Logging.h"

namespace evrdma::detail {

DeviceUsers& DeviceUsers::instance() {
  static DeviceUsers users;  // lives until exit: Reactors may be destroyed in any order
  return users;
}

void DeviceUsers::hold(ibv_context* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++uses_[context].holders;  // (an entry goes with its last holder: a context at a closed one's address starts afresh)
}

void DeviceUsers::markRemoved(ibv_context* context) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = uses_.find(context); it != uses_.end()) it->second.removed = true;
}

void DeviceUsers::release(ibv_context* context) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = uses_.find(context);
  if (it == uses_.end() || it->second.holders == 0) return;
  --it->second.holders;
  if (it->second.holders > 0) return;
  const bool removed = it->second.removed;
  uses_.erase(it);
  if (removed) forgetRemovedIfUnheldLocked();
}

void DeviceUsers::forgetRemovedIfUnheld() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  forgetRemovedIfUnheldLocked();
}

void DeviceUsers::forgetRemovedIfUnheldLocked() noexcept {
  for (const auto& [context, use] : uses_)
    if (use.removed && use.holders > 0) return;  // that holder lists them when it lets go
  // Under the lock: no Reactor can start holding a removed device meanwhile (librdmacm takes its
  // own lock inside and never calls back).
  int count = 0;
  if (ibv_context** devices = rdma_get_devices(&count)) rdma_free_devices(devices);
  ++listings_;
  EVRDMA_LOG(LogLevel::Debug, "listed the RDMA devices (%d): librdmacm lets go of those removed once no id uses them", count);
}

int DeviceUsers::listings() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return listings_;
}

}  // namespace evrdma::detail
