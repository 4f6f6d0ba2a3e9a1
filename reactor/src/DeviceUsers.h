// DeviceUsers: which verbs contexts the process's Reactors hold CQs, a completion channel and a PD
// on, across threads, and when librdmacm may be let go of a removed device.
//
// librdmacm closes a removed device's verbs context (the one all of those objects live on) once it
// has noticed the removal, which it does only while listing the devices, and no CM id uses the
// device any more. Objects left on a closed context can no longer be destroyed, and a driver that
// cannot disassociate its users (rxe, siw) then waits for them for ever. With several Reactors
// (a listener and its workers) the last CM id and the last CQ may go on different threads, in
// either order: so the devices are listed only when no Reactor holds anything on a removed device.
#pragma once

#include <infiniband/verbs.h>

#include <map>
#include <mutex>

namespace evrdma::detail {

class DeviceUsers {
 public:
  static DeviceUsers& instance();

  void hold(ibv_context* context);
  void markRemoved(ibv_context* context) noexcept;
  // One holder let go. If that leaves no removed device held, librdmacm is let go of the removed
  // ones (each closes once no CM id uses it).
  void release(ibv_context* context) noexcept;
  // For a removal seen where nothing was held (a listening Reactor whose agents live on workers):
  // the same, unless a holder elsewhere will do it when it lets go.
  void forgetRemovedIfUnheld() noexcept;

  // How many times the devices were listed for a removal (for tests).
  int listings() const noexcept;

 private:
  struct Use {
    int holders = 0;
    bool removed = false;
  };
  void forgetRemovedIfUnheldLocked() noexcept;

  mutable std::mutex mutex_;
  std::map<ibv_context*, Use> uses_;
  int listings_ = 0;
};

}  // namespace evrdma::detail
