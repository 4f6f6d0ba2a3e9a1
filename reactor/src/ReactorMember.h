// ReactorMember: the interface of everything made on a Reactor that must let go of it if the
// Reactor is destroyed first (see the lifetimes contract in Reactor.h).
#pragma once

#include "evrdma/ConnectionState.h"

namespace evrdma {
namespace detail {
// Everything made on a Reactor that must let go of it if the Reactor is destroyed first:
// connections, listeners, timers and watches.
class ReactorMember {
 public:
  // The Reactor is being destroyed: release everything held on it now, and call nothing of the
  // application's (no callback fires). The object stays a closed shell until its owner drops it.
  virtual void onReactorGone() noexcept = 0;
  // A connection's state, for Reactor::stats(); false for what is not a connection.
  virtual bool connectionState(ConnectionState& /*state*/) const noexcept { return false; }
  // The Reactor is about to linger (Reactor::setLinger): only evrdma's channels are served from
  // now on, then onReactorGone comes. A byte stream takes over what its program wrote and starts
  // its FIN; whatever would call the application stops doing so.
  virtual void beforeLinger() noexcept {}
  // Still has work to finish before the Reactor may go (a stream sending, or disconnecting).
  virtual bool lingering() const noexcept { return false; }

 protected:
  ~ReactorMember() = default;
};
}  // namespace detail

}  // namespace evrdma
