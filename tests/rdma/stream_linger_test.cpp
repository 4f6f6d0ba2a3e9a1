// A Reactor destroyed while its streams still send (Reactor::setLinger), over real RDMA: the peer
// (a ReactorThread of its own) reads every byte the program wrote, then EOF, while nothing of the
// application's is called on the Reactor that goes (a message connection on it keeps receiving
// meanwhile); and a peer that stops reading holds the destructor only for the linger time, after
// which the stream is reset. A callback of the program's due when the Reactor goes still comes,
// before ESHUTDOWN, once its loop runs again.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "LoopHold.h"
#include "PatternSink.h"
#include "RunUntil.h"
#include "TestBed.h"
#include "evrdma/Client.h"
#include "evrdma/Connection.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Stream.h"
#include "evrdma/Watch.h"

namespace {

using evrdma::test::runUntil;
using namespace std::chrono_literals;

using evrdma::test::patternByte;
using evrdma::test::Sink;
using evrdma::test::waitOnPeer;

// An agent that sends a message every millisecond to whoever connects (framed: credits pace it).
struct Chatter : evrdma::ConnectionHandler {
  std::unique_ptr<evrdma::Timer> tick;
  void onEstablished(evrdma::Connection& c) noexcept override {
    tick = std::make_unique<evrdma::Timer>(c.reactor(), [&c] { (void)c.postSend("tick", 4); });
    tick->startPeriodic(1ms);
  }
  void onClosed(evrdma::Connection&) noexcept override { tick.reset(); }
};

struct ChatterFactory : evrdma::AgentFactory {
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    evrdma::ConnectionOptions options;
    options.framed = true;
    return evrdma::AcceptDecision::accept(std::make_unique<Chatter>(), options);
  }
};

// The application's message handler on the Reactor that goes: counts what it hears, and what it
// hears while that Reactor is being destroyed.
struct Listening : evrdma::ConnectionHandler {
  std::atomic<bool>* destroying;
  int received = 0, calledWhileDestroying = 0;
  explicit Listening(std::atomic<bool>& d) : destroying(&d) {}
  void heard() { calledWhileDestroying += *destroying ? 1 : 0; }
  void onEstablished(evrdma::Connection&) noexcept override { heard(); }
  void onRecv(evrdma::Connection&, const uint8_t*, size_t) noexcept override {
    ++received;
    heard();
  }
  void onDisconnected(evrdma::Connection&) noexcept override { heard(); }
  void onError(evrdma::Connection&, int, const char*) noexcept override { heard(); }
  void onClosed(evrdma::Connection&) noexcept override { heard(); }
};

void writePattern(bufferevent* bev, size_t bytes) {
  std::vector<uint8_t> all(bytes);
  for (size_t i = 0; i < bytes; ++i) all[i] = patternByte(i);
  bufferevent_write(bev, all.data(), all.size());
}

// Writes `bytes` of the pattern to a new stream on `reactor` to `port` (0: none); its end once
// connected, null if it did not.
bufferevent* connectAndWrite(evrdma::Reactor& reactor, const std::string& ip, uint16_t port, size_t bytes) {
  return evrdma::test::connectedStream(reactor, ip, port, {}, [bytes](bufferevent* bev) {
    if (bytes > 0) writePattern(bev, bytes);
  });
}

class StreamLingerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(evrdma::test::loadTestBed(bed)); }
  // `sink` listens on `peer`'s Reactor.
  bool listening(evrdma::ReactorThread& peer, Sink& sink) {
    int listened = -1;
    if (peer.valid()) peer.runAndWait([&] { listened = sink.listen(peer.reactor(), bed.ip); });
    return listened == 0;
  }
  evrdma::test::TestBed bed;
};

TEST_F(StreamLingerTest, ADestroyedReactorSendsEveryByteItsStreamsHoldThenEofAndCallsNothingOfTheApplications) {
  evrdma::ReactorThread peer;
  ASSERT_TRUE(peer.valid());
  Sink sink;
  ChatterFactory chatterFactory;
  evrdma::Listener::Ptr chatter;
  int listened = -1;
  peer.runAndWait([&] {
    listened = sink.listen(peer.reactor(), bed.ip);
    chatter = evrdma::Listener::create(peer.reactor(), chatterFactory);
    if (listened == 0) listened = chatter->listen(bed.ip, 0);
  });
  ASSERT_EQ(listened, 0);
  // Under the sanitizers and valgrind (EVRDMA_STRESS=light) a quarter: they look for memory errors.
  const size_t kBytes = evrdma::test::lightStress() ? size_t{2} << 20 : size_t{8} << 20;
  std::atomic<bool> destroying{false};
  auto listening = std::make_unique<Listening>(destroying);
  Listening& heard = *listening;
  evrdma::Client::Ptr client;
  event_base* base = event_base_new();  // the program's: it outlives the Reactor, and `held` on it
  ASSERT_NE(base, nullptr);
  bufferevent* held = nullptr;
  {
    evrdma::Reactor reactor(base);
    evrdma::ClientOptions options;
    options.framed = true;
    client = evrdma::Client::create(reactor, std::move(listening), options);
    ASSERT_EQ(client->connect(bed.ip, chatter->port()), 0);
    bufferevent* freed = connectAndWrite(reactor, bed.ip, sink.listener->port(), 0);
    held = connectAndWrite(reactor, bed.ip, sink.listener->port(), 0);
    ASSERT_NE(freed, nullptr);
    ASSERT_NE(held, nullptr);
    // The chatter's messages keep coming (to the end, while the Reactor lingers).
    ASSERT_TRUE(runUntil(reactor, [&] { return heard.received >= 10; }, 60s));
    // The program's last work: it writes to both, frees one and ends at once, no loop turn before
    // the Reactor goes: every byte leaves while it lingers.
    writePattern(freed, kBytes);
    writePattern(held, kBytes);
    bufferevent_free(freed);
    reactor.setLinger(120s);  // generous: it only bounds a hang
    destroying = true;
    // `held` outlives the Reactor (the program frees it after): it goes as if freed.
  }
  destroying = false;
  EXPECT_EQ(heard.calledWhileDestroying, 0) << "a callback of the application's ran while the Reactor lingered";
  ASSERT_TRUE(waitOnPeer(peer, [&] { return sink.allEnded(2); }));
  peer.runAndWait([&] {
    for (const auto& stream : sink.streams) {
      EXPECT_EQ(stream->bytes, kBytes);
      EXPECT_EQ(stream->firstBad, UINT64_MAX) << "a byte differed";
      EXPECT_TRUE(stream->eof) << strerror(stream->error);
    }
  });
  bufferevent_free(held);
  client.reset();
  // No loop turn first, though runUntil left the loop while bytes moved: libevent's finalizers run
  // in event_base_free, and the streams go with them (under ASan and valgrind, nothing leaks).
  event_base_free(base);
  peer.runAndWait([&] {
    chatter.reset();
    sink.listener.reset();
  });
}

TEST_F(StreamLingerTest, APeerThatStopsReadingHoldsTheDestructorForTheLingerTimeOnlyThenTheStreamIsReset) {
  evrdma::ReactorThread peer;
  Sink sink;
  ASSERT_TRUE(listening(peer, sink));
  // Under the sanitizers and valgrind (EVRDMA_STRESS=light) a quarter: they look for memory errors.
  const size_t kBytes = evrdma::test::lightStress() ? size_t{2} << 20 : size_t{8} << 20;
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  {
    evrdma::test::LoopHold stopped(peer);  // declared before the Reactor: the peer runs again only once it is gone
    evrdma::Reactor reactor(base);
    bufferevent* bev = connectAndWrite(reactor, bed.ip, sink.listener->port(), kBytes);
    ASSERT_NE(bev, nullptr);
    ASSERT_TRUE(waitOnPeer(peer, [&] { return sink.streams.size() == 1; }));
    // The peer's loop stops: its evrdma returns no credit, and reads nothing it was sent.
    ASSERT_TRUE(stopped.hold());
    bufferevent_free(bev);
    reactor.setLinger(500ms);
    // Leaving the scope destroys the Reactor first: it returns while the peer is still stopped.
  }
  // The loop was left (runUntil) while bytes moved, and no turn follows: event_base_free drops
  // the deferred callbacks still scheduled unrun, and the stream had taken its own off the base.
  event_base_free(base);
  // Past the linger time the stream was reset: the peer, running again, hears ECONNRESET, having
  // read only part of what was written.
  ASSERT_TRUE(waitOnPeer(peer, [&] { return sink.allEnded(1); }));
  peer.runAndWait([&] {
    EXPECT_EQ(sink.streams[0]->error, ECONNRESET) << strerror(sink.streams[0]->error);
    EXPECT_FALSE(sink.streams[0]->eof);
    EXPECT_LT(sink.streams[0]->bytes, kBytes);
    sink.listener.reset();
  });
}

// A run of the program's callbacks still due when the Reactor goes (its write callback, asked
// for with bufferevent_trigger: libevent runs it deferred) is not lost, though the stream takes it
// off the base meanwhile (a program may free its end and its base next, and event_base_free would
// drop the run unrun with the reference it holds on the end): once the loop runs again, the write
// callback comes, then BEV_EVENT_ERROR with ESHUTDOWN.
TEST_F(StreamLingerTest, ACallbackDueWhenTheReactorGoesComesBeforeEshutdownOnceTheLoopRunsAgain) {
  evrdma::ReactorThread peer;
  Sink sink;
  ASSERT_TRUE(listening(peer, sink));
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  std::vector<std::string> heard;
  bufferevent* bev = nullptr;
  {
    evrdma::Reactor reactor(base);
    bev = connectAndWrite(reactor, bed.ip, sink.listener->port(), 0);
    ASSERT_NE(bev, nullptr);
    bufferevent_setcb(
        bev, nullptr, [](bufferevent*, void* up) { static_cast<std::vector<std::string>*>(up)->push_back("write"); },
        [](bufferevent*, short what, void* up) {
          const int err = EVUTIL_SOCKET_ERROR();
          static_cast<std::vector<std::string>*>(up)->push_back(
              (what & BEV_EVENT_ERROR) != 0 ? std::string("error: ") + strerror(err) : "event " + std::to_string(what));
        },
        &heard);
    bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
    ASSERT_TRUE(heard.empty()) << "the write callback ran at once: nothing would be due";
    reactor.setLinger(60s);  // (only bounds a hang)
  }
  ASSERT_TRUE(heard.empty()) << "a callback of the program's ran while the Reactor went";
  const timeval turn = {0, 0};
  for (int i = 0; i < 100 && heard.size() < 2; ++i) {
    event_base_loopexit(base, &turn);
    event_base_dispatch(base);
  }
  EXPECT_EQ(heard, (std::vector<std::string>{"write", std::string("error: ") + strerror(ESHUTDOWN)}));
  bufferevent_free(bev);
  event_base_free(base);
  ASSERT_TRUE(waitOnPeer(peer, [&] { return sink.allEnded(1); }));
  peer.runAndWait([&] { sink.listener.reset(); });
}

}  // namespace
