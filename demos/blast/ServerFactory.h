// ServerFactory: what blast-server's two factories (its own protocol, and the OFA notes' blast-sr-2
// with -o ofa) share: when the listener stops, say why on stderr and tell the server
// (listenerErrorHook: after a device removal it listens again once the device is back).
#pragma once

#include <cstdio>
#include <cstring>
#include <functional>

#include "evrdma/Callbacks.h"

namespace blast {

class ServerFactory : public evrdma::AgentFactory {
 public:
  void onListenerError(int err, const char* op) noexcept override {
    std::fprintf(stderr, "blast-server: listener: %s: %s\n", op, std::strerror(-err));
    if (listenerErrorHook) listenerErrorHook(err);
  }
  std::function<void(int err)> listenerErrorHook;  // the listener stopped (e.g. -ENODEV)
};

}  // namespace blast
