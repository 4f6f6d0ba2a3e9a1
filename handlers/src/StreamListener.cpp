// StreamListener: a Listener whose factory makes a byte stream for each connect request and hands
// the program its bufferevent once the connection is up; freed as an evconnlistener is: it stops
// listening, and the streams it handed out go on.
#include <event2/bufferevent.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "ByteStream.h"
#include "ReactorCore.h"
#include "ReactorMember.h"
#include "evrdma/Address.h"
#include "evrdma/Connection.h"
#include "evrdma/Stream.h"

namespace evrdma {

class StreamListener::Impl final : public AgentFactory, public detail::ReactorMember {
 public:
  Impl(Reactor& reactor, Callback callback, const StreamListenerOptions& options)
      : reactor_(reactor), options_(options), handing_(std::make_shared<Handing>()) {
    options_.stream.connection.framed = true;
    handing_->callback = std::move(callback);
    handing_->stream = options_.stream;
    listener_ = Listener::create(reactor, *this, options_.listener);
    coreOf(reactor).join(this);
  }
  ~Impl() {
    if (!reactorGone_) coreOf(reactor_).leave(this);
  }
  // The Reactor is going: a released listener's drain will never end, so it ends here.
  void onReactorGone() noexcept override {
    reactorGone_ = true;
    if (handing_->released) delete this;
  }

  AcceptDecision onConnectRequest(const ConnectRequest&) noexcept override {
    if (!enabled_) return AcceptDecision::reject("not accepting connections now");
    const ConnectionOptions connection = detail::ByteStream::connectionOptions(options_.stream);
    std::shared_ptr<Handing> handing = handing_;
    if (!options_.listener.workers.empty()) {
      // The connection runs on a worker: its stream, and the program's bufferevent, are made there,
      // on that worker's loop, once the connection is up.
      return AcceptDecision::accept(detail::ByteStream::handlerMakingStream([handing](Connection& c) {
        int error = 0;
        detail::ByteStream* stream = detail::ByteStream::create(c.reactor(), handing->stream, error);
        if (stream != nullptr)
          stream->onceEstablished([handing](detail::ByteStream& s, Connection& up) { handing->handOut(s, up); });
        return stream;
      }), connection);
    }
    int error = 0;
    detail::ByteStream* stream = detail::ByteStream::create(listener_->reactor(), options_.stream, error);
    if (stream == nullptr) return AcceptDecision::reject(std::string("server could not make a stream: ") + strerror(-error));
    stream->onceEstablished([handing](detail::ByteStream& s, Connection& up) { handing->handOut(s, up); });
    return AcceptDecision::accept(stream->makeHandler(), connection);
  }

  // Stops listening; the accepted streams go on, and the Listener (and this) go with the last.
  void release() {
    enabled_ = false;
    handing_->released = true;
    if (reactorGone_) {
      delete this;
      return;
    }
    listener_->drain(std::chrono::hours(24 * 365 * 10), [this] { delete this; });
  }

  // What hands a stream out once it is up, on the connection's thread (a worker's, with workers):
  // shared by every stream on its way, so that it outlives this Impl (whose Reactor may go first).
  struct Handing {
    Callback callback;
    StreamOptions stream;
    std::atomic<bool> released{false};  // the program dropped the listener
    std::atomic<uint64_t> accepted{0};

    void handOut(detail::ByteStream& established, Connection& c) noexcept {
      if (released) {  // nobody takes this stream
        c.close();
        return;
      }
      sockaddr_storage peer{};
      int length = 0;
      if (rdma_cm_id* id = c.cmId()) {
        const sockaddr* address = rdma_get_peer_addr(id);
        length = static_cast<int>(addressLength(address));
        std::memcpy(&peer, address, static_cast<size_t>(length));
      }
      established.handOut();
      ++accepted;
      callback(established.userEnd(), reinterpret_cast<const sockaddr*>(&peer), length);
    }
  };

  Reactor& reactor_;
  Listener::Ptr listener_;
  StreamListenerOptions options_;
  std::shared_ptr<Handing> handing_;
  bool enabled_ = true;
  bool reactorGone_ = false;
};

void StreamListener::Release::operator()(StreamListener* listener) const noexcept { delete listener; }

StreamListener::StreamListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StreamListener::~StreamListener() { impl_.release()->release(); }

StreamListener::Ptr StreamListener::create(Reactor& reactor, Callback callback, const StreamListenerOptions& options) {
  return Ptr(new StreamListener(std::make_unique<Impl>(reactor, std::move(callback), options)));
}

int StreamListener::listen(const std::string& address, uint16_t port, int backlog) noexcept {
  return impl_->listener_->listen(address, port, backlog);
}
uint16_t StreamListener::port() const noexcept { return impl_->listener_->port(); }
void StreamListener::enable() noexcept { impl_->enabled_ = true; }
void StreamListener::disable() noexcept { impl_->enabled_ = false; }
uint64_t StreamListener::accepted() const noexcept { return impl_->handing_->accepted; }

}  // namespace evrdma
