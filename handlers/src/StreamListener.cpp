// StreamListener: a Listener whose factory makes a byte stream for each connect request and hands
// the program its bufferevent once the connection is up; freed as an evconnlistener is: it stops
// listening, and the streams it handed out go on.
#include <event2/bufferevent.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ByteStream.h"
#include "ReactorCore.h"
#include "ReactorMember.h"
#include "evrdma/Connection.h"
#include "evrdma/Stream.h"

namespace evrdma {

class StreamListener::Impl final : public AgentFactory, public detail::ReactorMember {
 public:
  Impl(Reactor& reactor, Callback callback, const StreamListenerOptions& options)
      : reactor_(reactor), callback_(std::move(callback)), options_(options) {
    options_.stream.connection.framed = true;
    // Workers are refused at listen(): the Listener never hears of them, so it never posts to
    // their Reactors (which the program may destroy first).
    workersAsked_ = !options_.listener.workers.empty();
    options_.listener.workers.clear();
    listener_ = Listener::create(reactor, *this, options_.listener);
    reactor.core().join(this);
  }
  ~Impl() {
    if (!reactorGone_) reactor_.core().leave(this);
  }
  // The Reactor is going: a released listener's drain will never end, so it ends here.
  void onReactorGone() noexcept override {
    reactorGone_ = true;
    if (released_) delete this;
  }

  AcceptDecision onConnectRequest(const ConnectRequest&) noexcept override {
    if (!enabled_) return AcceptDecision::reject("not accepting connections now");
    int error = 0;
    detail::ByteStream* stream = detail::ByteStream::create(listener_->reactor(), options_.stream, error);
    if (stream == nullptr) return AcceptDecision::reject(std::string("server could not make a stream: ") + strerror(-error));
    stream->onceEstablished([this](detail::ByteStream& established, Connection& c) {
      if (released_) {  // the program dropped the listener: nobody takes this stream
        c.close();
        return;
      }
      sockaddr_storage peer{};
      int length = 0;
      if (rdma_cm_id* id = c.cmId()) {
        const sockaddr* address = rdma_get_peer_addr(id);
        length = address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
        std::memcpy(&peer, address, static_cast<size_t>(length));
      }
      established.handOut();
      ++accepted_;
      callback_(established.userEnd(), reinterpret_cast<const sockaddr*>(&peer), length);
    });
    const ConnectionOptions connection = detail::ByteStream::connectionOptions(options_.stream);
    return AcceptDecision::accept(stream->makeHandler(), connection);
  }

  // Stops listening; the accepted streams go on, and the Listener (and this) go with the last.
  void release() {
    enabled_ = false;
    released_ = true;
    if (reactorGone_) {
      delete this;
      return;
    }
    listener_->drain(std::chrono::hours(24 * 365 * 10), [this] { delete this; });
  }

  Reactor& reactor_;
  Listener::Ptr listener_;
  Callback callback_;
  StreamListenerOptions options_;
  bool workersAsked_ = false;
  bool enabled_ = true;
  bool released_ = false;
  bool reactorGone_ = false;
  uint64_t accepted_ = 0;
};

void StreamListener::Release::operator()(StreamListener* listener) const noexcept { delete listener; }

StreamListener::StreamListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StreamListener::~StreamListener() { impl_.release()->release(); }

StreamListener::Ptr StreamListener::create(Reactor& reactor, Callback callback, const StreamListenerOptions& options) {
  return Ptr(new StreamListener(std::make_unique<Impl>(reactor, std::move(callback), options)));
}

int StreamListener::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  // A worker would run the connection on its thread, under a bufferevent on this Reactor's base.
  if (impl_->workersAsked_) return -EOPNOTSUPP;
  return impl_->listener_->listen(address, port, backlog);
}
uint16_t StreamListener::port() const noexcept { return impl_->listener_->port(); }
void StreamListener::enable() noexcept { impl_->enabled_ = true; }
void StreamListener::disable() noexcept { impl_->enabled_ = false; }
uint64_t StreamListener::accepted() const noexcept { return impl_->accepted_; }

}  // namespace evrdma
