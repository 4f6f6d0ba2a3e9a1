// Listener: its API over its ListenerCore, and its release (freed once its last agent is gone).
#include "evrdma/Listener.h"

#include "ConnectRequests.h"
#include "ListenerCore.h"

namespace evrdma {

Listener::Listener(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options)
    : core_(std::make_unique<ListenerCore>(reactor, factory, options)) {}

Listener::~Listener() = default;

Listener::Ptr Listener::create(Reactor& reactor, AgentFactory& factory, const ListenerOptions& options) {
  return Ptr(new Listener(reactor, factory, options));
}

void Listener::Release::operator()(Listener* listener) const noexcept {
  listener->core_->release([listener] { delete listener; });
}

int Listener::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  return core_->listen(address, port, backlog);
}
int Listener::kernelMaxBacklog() noexcept { return detail::readKernelMaxBacklog(); }
uint16_t Listener::port() const noexcept { return core_->port(); }
void Listener::close() noexcept { core_->close(); }
void Listener::drain(std::chrono::milliseconds grace, std::function<void()> drained) {
  core_->drain(grace, std::move(drained));
}
bool Listener::draining() const noexcept { return core_->draining(); }
size_t Listener::agentCount() const noexcept { return core_->agentCount(); }
void Listener::forEachAgent(const std::function<void(Agent&)>& fn) const { core_->forEachAgent(fn); }
size_t Listener::forEachAgentFrom(AgentWalk& walk, size_t most, const std::function<void(Agent&)>& fn) const {
  return core_->forEachAgentFrom(walk, most, fn);
}
ConnectionCounts Listener::agentsByState() const noexcept { return core_->agentsByState(); }
ConnectionStats Listener::agentTotals() const noexcept { return core_->agentTotals(); }
std::vector<WorkerFigures> Listener::workerFigures() const { return core_->workerFigures(); }
const ListenerStats& Listener::stats() const noexcept { return core_->stats(); }
uint64_t Listener::unestablishedMemory() const noexcept { return core_->unestablishedMemory(); }
Reactor& Listener::reactor() const noexcept { return core_->reactor(); }

}  // namespace evrdma
