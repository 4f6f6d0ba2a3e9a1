// AgentCore: accepting the connect request the agent was made from (its accept timeout), and
// telling its owner when it is established or finished.
#include "AgentCore.h"

#include <cerrno>

#include "AgentOwner.h"
#include "CmEvent.h"
#include "evrdma/Agent.h"
#include "evrdma/PrivateData.h"

namespace evrdma {

AgentCore::AgentCore(detail::AgentOwner& owner, Reactor& reactor, std::unique_ptr<ConnectionHandler> handler,
                     const ConnectionOptions& options, std::chrono::milliseconds acceptTimeout,
                     std::chrono::milliseconds helloTimeout)
    : ConnectionCore(reactor, std::move(handler), options, false),
      owner_(owner),
      acceptTimeout_(acceptTimeout),
      helloTimeout_(helloTimeout),
      waitTimer_(reactor, [this] {
        // The client never completed the connection (it went away, or never reads its events), or
        // completed it and said no hello: the agent's resources go back instead of waiting for the
        // transport to give up.
        if (waitsForHello_)
          owner_.agentSilentTooLong(agent());
        else
          fail(-ETIMEDOUT, "accept: the client did not complete the connection within acceptTimeout");
      }) {}

Agent& AgentCore::agent() const noexcept { return static_cast<Agent&>(facade()); }

AgentCore& coreOf(Agent& agent) noexcept { return static_cast<AgentCore&>(coreOf(static_cast<const Connection&>(agent))); }

int AgentCore::accept(CmId id, const std::vector<uint8_t>& privateData, const char*& op,
                      detail::PreparedMappings* prepared) noexcept {
  adoptId(std::move(id));
  if (privateData.size() > maxPrivateData(id_.get(), PrivateDataUse::Accept)) {
    op = "accept: private data longer than this transport carries";
    return -EMSGSIZE;
  }
  if (int rc = setUpVerbs(op, prepared); rc != 0) return rc;
  rdma_conn_param param = connParam(privateData);
  setLife(detail::Life::Accepting);
  if (rdma_accept(id_.get(), &param) != 0) {
    op = "rdma_accept";
    return errno ? -errno : -EINVAL;
  }
  if (acceptTimeout_.count() > 0) {
    acceptDeadline_ = std::chrono::steady_clock::now() + acceptTimeout_;
    waitTimer_.startOnce(acceptTimeout_);
  }
  return 0;
}

// The client refused our accept: its connect timed out before the accept reached it.
void AgentCore::onConnectRejected(const CmEvent&) noexcept { owner_.agentAbandoned(agent()); }

void AgentCore::onConnectFailed(const CmEvent& event) noexcept {
  fail(event.status < 0 ? event.status : -ECONNABORTED, "accept: the client never completed the connection");
}

void AgentCore::onEstablishedByRole() noexcept {
  waitTimer_.cancel();
  owner_.releaseUnestablished(agent());
}

void AgentCore::onAwaitingHello() noexcept {
  owner_.agentSilent(agent());
  if (helloTimeout_.count() == 0) return;
  // One timer bounds the wait: moved up to the hello's deadline when that comes before the accept's.
  if (acceptTimeout_.count() > 0 && acceptDeadline_ <= std::chrono::steady_clock::now() + helloTimeout_) return;
  waitsForHello_ = true;
  waitTimer_.startOnce(helloTimeout_);
}

void AgentCore::onFinished() noexcept {
  waitTimer_.cancel();
  owner_.releaseUnestablished(agent());  // if never established
  owner_.agentFinished(agent());
}

}  // namespace evrdma
