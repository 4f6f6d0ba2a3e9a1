// A peer that never reads what a stream server answers: it costs the server its own stream's
// window and nothing more, the server's other clients are served meanwhile, and once it has taken
// nothing for the send timeout (StreamOptions' connection.creditTimeout) the server's program hears
// BEV_EVENT_ERROR with ETIMEDOUT and frees it. Over real RDMA, in one Reactor.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "RunUntil.h"
#include "TestBed.h"
#include "evrdma/Reactor.h"
#include "evrdma/Stream.h"

namespace {

using evrdma::test::runUntil;
using namespace std::chrono_literals;

// The server's program, written as kv-server is: each line read is answered with a 64-byte line,
// and while more than kRepliesHeld of its answers wait to go it stops reading (a client that does
// not read its answers waits); once they have gone it reads again.
constexpr size_t kRepliesHeld = 64 << 10;
const std::string kReply = std::string(63, 'v') + "\n";

struct Session {
  bufferevent* bev = nullptr;
  uint64_t written = 0;  // answer bytes written into its output
  uint64_t lines = 0;
  int error = 0;  // EVUTIL_SOCKET_ERROR() of the error event that ended it
  bool ended = false;

  void answer() {
    evbuffer* input = bufferevent_get_input(bev);
    evbuffer* output = bufferevent_get_output(bev);
    size_t length = 0;
    while (evbuffer_get_length(output) <= kRepliesHeld) {
      char* line = evbuffer_readln(input, &length, EVBUFFER_EOL_LF);
      if (line == nullptr) return;
      free(line);
      ++lines;
      bufferevent_write(bev, kReply.data(), kReply.size());
      written += kReply.size();
    }
    bufferevent_disable(bev, EV_READ);
  }
  static void onRead(bufferevent*, void* self) { static_cast<Session*>(self)->answer(); }
  static void onWrite(bufferevent* b, void* self) {
    bufferevent_enable(b, EV_READ);  // its answers have gone
    static_cast<Session*>(self)->answer();
  }
  static void onEvent(bufferevent* b, short what, void* self) {
    auto* session = static_cast<Session*>(self);
    if ((what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) == 0) return;
    if (what & BEV_EVENT_ERROR) session->error = EVUTIL_SOCKET_ERROR();
    session->ended = true;
    session->bev = nullptr;
    bufferevent_free(b);
  }
};

// A client that asks one line at a time and counts its answers.
struct Asker {
  bufferevent* bev = nullptr;
  bool connected = false;
  int error = 0;
  uint64_t answers = 0;
  std::string partial;
  void ask() { bufferevent_write(bev, "ask\n", 4); }
  static void onRead(bufferevent* b, void* self) {
    auto* asker = static_cast<Asker*>(self);
    evbuffer* input = bufferevent_get_input(b);
    size_t length = 0;
    while (char* line = evbuffer_readln(input, &length, EVBUFFER_EOL_LF)) {
      free(line);
      ++asker->answers;
    }
  }
  static void onEvent(bufferevent*, short what, void* self) {
    auto* asker = static_cast<Asker*>(self);
    if (what & BEV_EVENT_CONNECTED) asker->connected = true;
    if (what & BEV_EVENT_ERROR) asker->error = EVUTIL_SOCKET_ERROR();
  }
};

// Small windows, so the never-reading client fills them with little (under valgrind too).
evrdma::StreamOptions smallWindows() {
  evrdma::StreamOptions options;
  options.connection.maxMessageSize = 4096;
  options.connection.recvDepth = 8;
  options.connection.sendDepth = 8;
  options.receiveWindow = 64 << 10;
  options.sendWindow = 16 << 10;
  return options;
}

TEST(StreamSendTimeout, APeerThatNeverReadsHoldsOnlyItsWindowIsEndedWithEtimedoutAndTheOthersAreServedMeanwhile) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  options.stream = smallWindows();
  options.stream.connection.creditTimeout = 3s;  // the server's send timeout
  std::vector<std::unique_ptr<Session>> sessions;  // in the order the clients connect
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    sessions.push_back(std::make_unique<Session>());
    Session* session = sessions.back().get();
    session->bev = bev;
    bufferevent_setcb(bev, Session::onRead, Session::onWrite, Session::onEvent, session);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);

  // The client that never reads: 1 MiB of questions at once, reading never enabled.
  Asker silent;
  silent.bev = evrdma::Stream::connect(reactor, bed.ip, listener->port(), smallWindows());
  ASSERT_NE(silent.bev, nullptr);
  bufferevent_setcb(silent.bev, nullptr, nullptr, Asker::onEvent, &silent);
  bufferevent_enable(silent.bev, EV_WRITE);
  const std::string questions(1 << 20, '\n');  // a million empty lines, each answered
  bufferevent_write(silent.bev, questions.data(), questions.size());
  ASSERT_TRUE(runUntil(reactor, [&] { return silent.connected && sessions.size() == 1; }, 60s)) << silent.error;
  Session& stalled = *sessions[0];

  // Until nothing moves: the server's answers wait for the silent client's credits, and the
  // server's stream holds what the client sent, its window full (its program stopped reading).
  evrdma::StreamStats stats;
  ASSERT_TRUE(runUntil(reactor, [&] {
    return !stalled.ended && evrdma::Stream::stats(stalled.bev, stats) == 0 && stats.waitingForPeer &&
           stats.receivingPaused;
  }, 120s)) << "never stalled: waiting " << stats.waitingForPeer << ", paused " << stats.receivingPaused
            << ", ended " << stalled.ended;
  const auto stalledAt = std::chrono::steady_clock::now();
  // What the server holds for it: the questions within its receive window (and what the credits
  // it had granted when it paused still brought: a receive ring's worth), and of its answers,
  // what its program kept (its own choice, as over TCP) and what the stream took from there: the
  // pair's share (sendWindow, and 16 KiB under the program's end) and the send buffers.
  const evrdma::StreamOptions& windows = options.stream;
  EXPECT_LE(stats.heldForProgram,
            windows.receiveWindow + uint64_t{windows.connection.recvDepth} * windows.connection.maxMessageSize);
  const uint64_t kept = evbuffer_get_length(bufferevent_get_output(stalled.bev));
  const uint64_t takenNotSent = stalled.written - kept - stats.connection.bytesSent;
  const uint64_t streamBound =
      windows.sendWindow + (16 << 10) + uint64_t{windows.connection.sendDepth} * windows.connection.maxMessageSize;
  EXPECT_LE(takenNotSent, streamBound) << "the stream took more of the answers than its window";
  std::printf("[ figures  ] stalled: the server answered %llu questions; holds %zu B of questions, %llu B of answers in "
              "its program's output, %llu B in the stream (bound %llu)\n",
              static_cast<unsigned long long>(stalled.lines), stats.heldForProgram,
              static_cast<unsigned long long>(kept), static_cast<unsigned long long>(takenNotSent),
              static_cast<unsigned long long>(streamBound));

  // Meanwhile another client asks 100 questions one at a time: every one is answered.
  Asker other;
  other.bev = evrdma::Stream::connect(reactor, bed.ip, listener->port(), smallWindows());
  ASSERT_NE(other.bev, nullptr);
  bufferevent_setcb(other.bev, Asker::onRead, nullptr, Asker::onEvent, &other);
  bufferevent_enable(other.bev, EV_READ | EV_WRITE);
  ASSERT_TRUE(runUntil(reactor, [&] { return other.connected; }, 60s)) << other.error;
  uint64_t answeredWhileStalled = 0;
  for (uint64_t asked = 1; asked <= 100; ++asked) {
    other.ask();
    ASSERT_TRUE(runUntil(reactor, [&] { return other.answers == asked; }, 60s)) << "question " << asked;
    if (!stalled.ended) ++answeredWhileStalled;
  }

  // The silent client is ended once it has taken nothing for the send timeout, with its reason.
  ASSERT_TRUE(runUntil(reactor, [&] { return stalled.ended; }, 120s)) << "a client that never reads is held for ever";
  EXPECT_EQ(stalled.error, ETIMEDOUT) << evutil_socket_error_to_string(stalled.error);
  std::printf("[ figures  ] the silent client was ended %.1f s after the stall (creditTimeout 3 s); %llu of the other "
              "client's 100 questions were answered before\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - stalledAt).count(),
              static_cast<unsigned long long>(answeredWhileStalled));
  EXPECT_EQ(other.error, 0);
  bufferevent_free(other.bev);
  bufferevent_free(silent.bev);
  for (auto& session : sessions)
    if (session->bev != nullptr) bufferevent_free(session->bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

}  // namespace
