// Byte streams over real RDMA as a libevent program uses them: a StreamListener and Stream::connect
// handing out bufferevents, random-sized writes both ways checked byte by byte, the half-close and
// EOF after the last byte, a refused connect's errno, and a slow reader holding the writer back in
// the writer's own output evbuffer while a second stream moves its bytes, what a reader that did
// not read holds reaching it after its writer freed its end and left, a thousand streams open
// at once on one Reactor, a thousand connect / write / free cycles leaving nothing held, streams
// served on worker loops, and received bytes lent to the program in their receive buffers.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "RunUntil.h"
#include "TestBed.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Stream.h"

namespace {

using evrdma::test::runUntil;
using namespace std::chrono_literals;

// Byte `index` of what side `side` sends: a reordered, lost or repeated byte shows.
uint8_t patternByte(uint64_t index, int side) {
  return static_cast<uint8_t>(((index * 2654435761u) >> 13) ^ (index >> 20) ^ static_cast<uint64_t>(side * 0x5a));
}

// One side of a stream: writes `total` bytes of its pattern in random-sized chunks (keeping about
// a megabyte in its output), checks every byte it reads against the peer's pattern, and records
// the events.
struct Side {
  Side(int side, uint64_t total, unsigned seed) : me(side), toSend(total), random(seed) {}

  void attach(bufferevent* b) {
    bev = b;
    bufferevent_setcb(bev, onRead, onWrite, onEvent, this);
    bufferevent_setwatermark(bev, EV_WRITE, 512 << 10, 0);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }
  void startWriting() {
    writing = true;
    writeMore();
  }
  void writeMore() {
    if (!writing || bev == nullptr) return;
    std::uniform_int_distribution<size_t> size(1, 200000);
    evbuffer* output = bufferevent_get_output(bev);
    while (sent < toSend && evbuffer_get_length(output) < (1u << 20))
      writePattern(std::min<uint64_t>(size(random), toSend - sent));
    if (sent == toSend && shutDownWhenSent && !shutDown) {
      shutDown = true;
      shutdownResult = evrdma::Stream::shutdownWrite(bev);
    }
  }
  // Writes the next `length` bytes of its pattern in one write (what one loop turn writes leaves
  // as one message).
  void writePattern(size_t length) {
    chunk.resize(length);
    for (size_t i = 0; i < length; ++i) chunk[i] = patternByte(sent + i, me);
    bufferevent_write(bev, chunk.data(), length);
    sent += length;
  }
  static void onRead(bufferevent* b, void* self) {
    auto* side = static_cast<Side*>(self);
    evbuffer* input = bufferevent_get_input(b);
    std::vector<uint8_t> bytes(evbuffer_get_length(input));
    evbuffer_remove(input, bytes.data(), bytes.size());
    for (uint8_t byte : bytes) {
      if (byte != patternByte(side->received, 1 - side->me) && side->firstBad == UINT64_MAX) side->firstBad = side->received;
      ++side->received;
    }
  }
  static void onWrite(bufferevent*, void* self) { static_cast<Side*>(self)->writeMore(); }
  static void onEvent(bufferevent*, short what, void* self) {
    auto* side = static_cast<Side*>(self);
    const int err = EVUTIL_SOCKET_ERROR();
    if (what & BEV_EVENT_CONNECTED) {
      side->connected = true;
      side->startWriting();
    }
    if (what & BEV_EVENT_EOF) side->eofAt = side->received;
    if (what & BEV_EVENT_ERROR) {
      side->error = err;
      side->errorEvents = what;
    }
  }

  const int me;
  const uint64_t toSend;
  std::mt19937 random;
  std::vector<uint8_t> chunk;
  bufferevent* bev = nullptr;
  bool writing = false, connected = false, shutDownWhenSent = true, shutDown = false;
  int shutdownResult = 1;
  uint64_t sent = 0, received = 0, firstBad = UINT64_MAX, eofAt = UINT64_MAX;
  int error = 0;
  short errorEvents = 0;
};

// What one end of the half-close test has read, and whether EOF came.
struct Ends {
  std::string* heard;
  bool* eof;
};

void appendInput(bufferevent* bev, void* ends) {
  evbuffer* input = bufferevent_get_input(bev);
  std::string more(evbuffer_get_length(input), '\0');
  evbuffer_remove(input, more.data(), more.size());
  *static_cast<Ends*>(ends)->heard += more;
}

// A server's end that appends what it reads to `ends` and frees itself at EOF or an error.
void readAllThenFree(bufferevent* bev, Ends* ends) {
  bufferevent_setcb(
      bev, appendInput, nullptr,
      [](bufferevent* b, short what, void*) {
        if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) bufferevent_free(b);
      },
      ends);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

// A listener that keeps its accepted end in `end` and only reads it, with `onRead`.
evrdma::StreamListener::Ptr readingListener(evrdma::Reactor& reactor, bufferevent*& end, bufferevent_data_cb onRead,
                                            void* arg, const evrdma::StreamListenerOptions& options = {}) {
  return evrdma::StreamListener::create(reactor, [&end, onRead, arg](bufferevent* bev, const sockaddr*, int) {
    end = bev;
    bufferevent_setcb(bev, onRead, nullptr, nullptr, arg);
    bufferevent_enable(bev, EV_READ);
  }, options);
}

// Streams between Sides on one Reactor: a listener that hands each accepted end to the next of
// `readers` (in the order their writers connect; reading disabled for those in `idle`), and
// writers connected one at a time.
class SidePairs {
 public:
  SidePairs(evrdma::Reactor& reactor, const evrdma::test::TestBed& bed, std::vector<Side*> readers,
            std::vector<Side*> idle = {}, const evrdma::StreamListenerOptions& options = {})
      : reactor_(reactor), ip_(bed.ip), readers_(std::move(readers)), idle_(std::move(idle)) {
    listener_ = evrdma::StreamListener::create(reactor, [this](bufferevent* bev, const sockaddr*, int) {
      if (accepted_ == readers_.size()) {  // not one of ours
        bufferevent_free(bev);
        return;
      }
      Side* reader = readers_[accepted_++];
      reader->attach(bev);
      if (std::find(idle_.begin(), idle_.end(), reader) != idle_.end()) bufferevent_disable(bev, EV_READ);
    }, options);
    listening_ = listener_->listen(ip_, 0) == 0;
  }
  SidePairs(const SidePairs&) = delete;  // its listener's callback holds `this`
  SidePairs& operator=(const SidePairs&) = delete;
  // Connects `writer` to the next reader; true once both have their ends and the writer heard CONNECTED.
  bool open(Side& writer) {
    if (!listening_) return false;
    const size_t expected = accepted_ + 1;
    bufferevent* bev = evrdma::Stream::connect(reactor_, ip_, listener_->port());
    if (bev == nullptr) return false;
    writer.attach(bev);
    return runUntil(reactor_, [&] { return writer.connected && accepted_ == expected; }, 60s);
  }
  size_t accepted() const { return accepted_; }

 private:
  evrdma::Reactor& reactor_;
  std::string ip_;
  std::vector<Side*> readers_, idle_;
  size_t accepted_ = 0;
  bool listening_ = false;
  evrdma::StreamListener::Ptr listener_;
};

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(evrdma::test::loadTestBed(bed)); }
  evrdma::test::TestBed bed;
};

TEST_F(StreamTest, RandomSizedWritesBothWaysArriveWholeInOrderThenEofAfterTheLastByte) {
  // 64 MiB each way: about 670 writes of 1 to 200 000 bytes, past every buffer and window edge many
  // times (256 MiB cost 26 s a stage and proved no more).
  const uint64_t total = evrdma::test::lightStress() ? (8u << 20) : (64u << 20);
  evrdma::Reactor reactor;
  Side server(0, total, 1), client(1, total, 2);
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr* peer, int length) {
    EXPECT_NE(peer, nullptr);
    EXPECT_GT(length, 0);
    server.attach(bev);
    server.startWriting();  // both ways at once
  });
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  int error = 1;
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port(), {}, &error);
  ASSERT_NE(bev, nullptr) << strerror(-error);
  EXPECT_EQ(error, 0);
  EXPECT_TRUE(evrdma::Stream::isStream(bev));
  client.attach(bev);

  const bool done = runUntil(reactor, [&] {
    return client.received == total && server.received == total && client.eofAt != UINT64_MAX &&
           server.eofAt != UINT64_MAX;
  }, 600s);
  EXPECT_TRUE(done) << "client received " << client.received << ", server " << server.received << " of " << total
                    << "; errors " << client.error << " / " << server.error;
  EXPECT_TRUE(client.connected);
  EXPECT_EQ(client.firstBad, UINT64_MAX) << "the client read a wrong byte at " << client.firstBad;
  EXPECT_EQ(server.firstBad, UINT64_MAX) << "the server read a wrong byte at " << server.firstBad;
  EXPECT_EQ(client.eofAt, total) << "EOF came before the last byte";
  EXPECT_EQ(server.eofAt, total) << "EOF came before the last byte";
  EXPECT_EQ(client.shutdownResult, 0);
  EXPECT_EQ(server.shutdownResult, 0);
  EXPECT_EQ(client.error, 0);
  EXPECT_EQ(server.error, 0);
  EXPECT_EQ(listener->accepted(), 1u);
  bufferevent_free(client.bev);
  bufferevent_free(server.bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

TEST_F(StreamTest, AfterAHalfCloseThePeerReadsEveryByteThenEofAndItsReplyStillArrives) {
  evrdma::Reactor reactor;
  std::string question = "what is the answer?", heard, reply;
  bool serverEof = false, clientEof = false;
  Ends serverEnds{&heard, &serverEof};
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    bufferevent_setcb(
        bev,
        appendInput,
        nullptr,
        [](bufferevent* b, short what, void* arg) {
          if ((what & BEV_EVENT_EOF) == 0) return;
          *static_cast<Ends*>(arg)->eof = true;
          // The question is whole: answer, and go (freed inside its own event callback).
          const std::string answer = "42, for: " + *static_cast<Ends*>(arg)->heard;
          bufferevent_write(b, answer.data(), answer.size());
          bufferevent_free(b);
        },
        &serverEnds);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  });
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
  ASSERT_NE(bev, nullptr);
  Ends clientEnds{&reply, &clientEof};
  bufferevent_setcb(
      bev,
      appendInput,
      nullptr,
      [](bufferevent*, short what, void* arg) {
        if (what & BEV_EVENT_EOF) *static_cast<Ends*>(arg)->eof = true;
      },
      &clientEnds);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  // Written and shut down at once, before the connection is up: it all goes once it is.
  bufferevent_write(bev, question.data(), question.size());
  ASSERT_EQ(evrdma::Stream::shutdownWrite(bev), 0);
  EXPECT_EQ(evrdma::Stream::shutdownWrite(bev), -EALREADY);

  ASSERT_TRUE(runUntil(reactor, [&] { return clientEof; }, 60s)) << "reply so far: '" << reply << "'";
  EXPECT_TRUE(serverEof);
  EXPECT_EQ(heard, question);
  EXPECT_EQ(reply, "42, for: " + question);
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// A few bytes written while connecting, then, from inside the BEV_EVENT_CONNECTED callback, the
// rest written in one go far past the send window (most of it still in the program's output
// evbuffer, some in the pair under it) and at once a half-close on one stream, bufferevent_free
// on the other: the peer reads every byte before EOF on both.
struct WriteAllThenEnd {
  const std::vector<uint8_t>* all;
  size_t early;  // written before the connection is up
  bool halfClose;
  int shutdownResult = 1;
  bool connected = false;

  static void onEvent(bufferevent* bev, short what, void* self) {
    auto* writer = static_cast<WriteAllThenEnd*>(self);
    if ((what & BEV_EVENT_CONNECTED) == 0) return;
    writer->connected = true;
    // In 64 KiB writes with a write low watermark, as a benchmark writes.
    bufferevent_setwatermark(bev, EV_WRITE, 1 << 20, 0);
    for (size_t at = writer->early; at < writer->all->size(); at += 64 << 10)
      bufferevent_write(bev, writer->all->data() + at, std::min<size_t>(64 << 10, writer->all->size() - at));
    if (writer->halfClose) {
      writer->shutdownResult = evrdma::Stream::shutdownWrite(bev);
    } else {
      bufferevent_free(bev);  // inside its own event callback
    }
  }
};

TEST_F(StreamTest, EveryByteWrittenBeforeAHalfCloseOrAFreeArrivesBeforeEofEvenPastTheSendWindow) {
  evrdma::Reactor reactor;
  const uint64_t total = 1000000;  // about 4 send windows
  std::vector<std::unique_ptr<Side>> readers;
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    readers.push_back(std::make_unique<Side>(0, 0, 1));
    readers.back()->shutDownWhenSent = false;
    readers.back()->attach(bev);
  });
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  std::vector<uint8_t> all(total);
  for (uint64_t i = 0; i < total; ++i) all[i] = patternByte(i, 1);
  for (const bool halfClose : {true, false}) {
    SCOPED_TRACE(halfClose ? "half-close" : "free");
    WriteAllThenEnd writer{&all, 5, halfClose};
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr);
    bufferevent_setcb(bev, nullptr, nullptr, WriteAllThenEnd::onEvent, &writer);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    bufferevent_write(bev, all.data(), writer.early);
    ASSERT_TRUE(runUntil(reactor, [&] { return !readers.empty() && readers.back()->eofAt != UINT64_MAX; }, 300s));
    const Side& reader = *readers.back();
    EXPECT_TRUE(writer.connected);
    EXPECT_EQ(reader.eofAt, total) << "EOF after " << reader.eofAt << " bytes of " << total;
    EXPECT_EQ(reader.received, total);
    EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;
    EXPECT_EQ(reader.error, 0) << strerror(reader.error);
    if (halfClose) {
      EXPECT_EQ(writer.shutdownResult, 0);
      bufferevent_free(bev);
    }
    bufferevent_free(reader.bev);
    EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
    readers.clear();
  }
}

// Over TCP, what a program writes while its bufferevent connects waits in its output evbuffer,
// and its write callback first runs once the bytes have gone, after BEV_EVENT_CONNECTED: a program
// that starts its clock or its hash at CONNECTED (stream-bench did) counts on it.
TEST_F(StreamTest, WhatIsWrittenWhileConnectingWaitsInTheOutputBufferUntilConnectedAsOverTcp) {
  evrdma::Reactor reactor;
  std::string heard;
  bool serverEof = false;
  Ends serverEnds{&heard, &serverEof};
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    readAllThenFree(bev, &serverEnds);
  });
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
  ASSERT_NE(bev, nullptr);
  struct Order {
    bool connected = false;
    int writesBeforeConnected = 0, writesAfter = 0;
  } order;
  bufferevent_setcb(
      bev, nullptr,
      [](bufferevent*, void* arg) {
        auto* o = static_cast<Order*>(arg);
        ++(o->connected ? o->writesAfter : o->writesBeforeConnected);
      },
      [](bufferevent*, short what, void* arg) {
        if (what & BEV_EVENT_CONNECTED) static_cast<Order*>(arg)->connected = true;
      },
      &order);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  const std::string early(1000, 'e');
  bufferevent_write(bev, early.data(), early.size());
  EXPECT_EQ(evbuffer_get_length(bufferevent_get_output(bev)), early.size());
  ASSERT_TRUE(runUntil(reactor, [&] { return heard.size() == early.size(); }, 60s)) << heard.size();
  EXPECT_EQ(heard, early);
  EXPECT_TRUE(runUntil(reactor, [&] { return order.writesAfter > 0; }, 60s));
  EXPECT_EQ(order.writesBeforeConnected, 0) << "the write callback ran before BEV_EVENT_CONNECTED";
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// A thousand writes of 10 bytes made in one loop turn leave as one message; one write of 1 MiB
// is cut at the peer's message size (16 KiB here, the writer's own is 64 KiB).
TEST_F(StreamTest, SmallWritesInOneLoopTurnLeaveAsOneMessageAndALargeOneIsCutAtThePeersMessageSize) {
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  options.stream.connection.maxMessageSize = 16 << 10;
  std::string heard;
  bool serverEof = false;
  Ends serverEnds{&heard, &serverEof};
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    readAllThenFree(bev, &serverEnds);
  }, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  Side client(1, 0, 2);
  client.shutDownWhenSent = false;
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
  ASSERT_NE(bev, nullptr);
  client.attach(bev);
  ASSERT_TRUE(runUntil(reactor, [&] { return client.connected && listener->accepted() == 1u; }, 60s));
  auto messagesSent = [&] {
    evrdma::StreamStats stats;
    EXPECT_EQ(evrdma::Stream::stats(bev, stats), 0);
    return stats.connection.messagesSent;
  };

  const uint64_t before = messagesSent();
  for (int i = 0; i < 1000; ++i) bufferevent_write(bev, "0123456789", 10);
  ASSERT_TRUE(runUntil(reactor, [&] { return heard.size() == 10000; }, 60s)) << heard.size();
  EXPECT_EQ(messagesSent() - before, 1u) << "1000 small writes of one turn";

  const uint64_t beforeLarge = messagesSent();
  const std::string large(1 << 20, 'L');
  bufferevent_write(bev, large.data(), large.size());
  ASSERT_TRUE(runUntil(reactor, [&] { return heard.size() == 10000 + large.size(); }, 60s)) << heard.size();
  const uint64_t messages = messagesSent() - beforeLarge;
  EXPECT_GE(messages, uint64_t{(1 << 20) / (16 << 10)}) << "a message longer than the peer's 16 KiB";
  EXPECT_EQ(client.error, 0) << strerror(client.error);
  std::printf("1000 writes of 10 B: 1 message; one of 1 MiB: %llu messages\n", static_cast<unsigned long long>(messages));
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// A StreamListener with workers: each accepted stream lives on a worker, its bufferevent on that
// worker's event_base and the callback on that worker's thread; both workers take streams, every
// line comes back, and everything closes once the clients have half-closed.
TEST_F(StreamTest, WorkersServeEachAcceptedStreamOnTheirOwnLoopAndThread) {
  evrdma::ReactorThread first, second;  // declared first: they outlive the listening Reactor
  ASSERT_TRUE(first.valid() && second.valid());
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  options.listener.workers = {&first.reactor(), &second.reactor()};
  struct Served {
    std::atomic<int> onFirst{0}, onSecond{0}, elsewhere{0};
  } served;
  const std::thread::id listening = std::this_thread::get_id();
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    event_base* base = bufferevent_get_base(bev);
    const bool onItsThread = std::this_thread::get_id() != listening;
    if (onItsThread && base == first.reactor().base())
      ++served.onFirst;
    else if (onItsThread && base == second.reactor().base())
      ++served.onSecond;
    else
      ++served.elsewhere;
    bufferevent_setcb(
        bev, [](bufferevent* b, void*) { bufferevent_write_buffer(b, bufferevent_get_input(b)); }, nullptr,
        [](bufferevent* b, short what, void*) {
          if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) bufferevent_free(b);  // what it echoed goes first
        },
        nullptr);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  constexpr int kStreams = 4, kLines = 200;
  struct Client {
    int lines = 0, bad = 0;
    bool eof = false;
    int error = 0;
  } clients[kStreams];
  std::vector<bufferevent*> ends;
  for (Client& client : clients) {
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr);
    ends.push_back(bev);
    bufferevent_setcb(
        bev,
        [](bufferevent* b, void* arg) {
          auto* c = static_cast<Client*>(arg);
          size_t length = 0;
          while (char* line = evbuffer_readln(bufferevent_get_input(b), &length, EVBUFFER_EOL_LF)) {
            if (std::string(line) != "line " + std::to_string(c->lines)) ++c->bad;
            ++c->lines;
            free(line);
          }
        },
        nullptr,
        [](bufferevent*, short what, void* arg) {
          auto* c = static_cast<Client*>(arg);
          if (what & BEV_EVENT_EOF) c->eof = true;
          if (what & BEV_EVENT_ERROR) c->error = EVUTIL_SOCKET_ERROR();
        },
        &client);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    for (int i = 0; i < kLines; ++i) evbuffer_add_printf(bufferevent_get_output(bev), "line %d\n", i);
    ASSERT_EQ(evrdma::Stream::shutdownWrite(bev), 0);
  }
  const bool done = runUntil(reactor, [&] {
    for (const Client& c : clients)
      if (!c.eof && c.error == 0) return false;
    return true;
  }, 120s);
  EXPECT_TRUE(done);
  for (const Client& c : clients) {
    EXPECT_EQ(c.lines, kLines);
    EXPECT_EQ(c.bad, 0);
    EXPECT_TRUE(c.eof) << strerror(c.error);
  }
  EXPECT_EQ(listener->accepted(), static_cast<uint64_t>(kStreams));
  EXPECT_EQ(served.elsewhere.load(), 0) << "a stream was handed out off its worker's loop or thread";
  EXPECT_GT(served.onFirst.load(), 0);
  EXPECT_GT(served.onSecond.load(), 0);
  for (bufferevent* bev : ends) bufferevent_free(bev);
  listener.reset();
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

TEST_F(StreamTest, ConnectingWhereNobodyListensEndsInAnErrorEventWithEconnrefused) {
  evrdma::Reactor reactor;
  // A port nobody listens on: take one from a listener, then drop it.
  uint16_t port = 0;
  {
    auto listener = evrdma::StreamListener::create(reactor, [](bufferevent*, const sockaddr*, int) {});
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
    port = listener->port();
  }
  ASSERT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, port);
  ASSERT_NE(bev, nullptr);
  struct Outcome {
    short what = 0;
    int err = 0;
  } outcome;
  bufferevent_setcb(bev, nullptr, nullptr,
                    [](bufferevent*, short what, void* arg) {
                      static_cast<Outcome*>(arg)->what = what;
                      static_cast<Outcome*>(arg)->err = EVUTIL_SOCKET_ERROR();
                    },
                    &outcome);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  ASSERT_TRUE(runUntil(reactor, [&] { return outcome.what != 0; }, 60s));
  EXPECT_TRUE(outcome.what & BEV_EVENT_ERROR) << outcome.what;
  EXPECT_EQ(outcome.err, ECONNREFUSED) << strerror(outcome.err);
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));

  int error = 0;
  EXPECT_EQ(evrdma::Stream::connect(reactor, "not-an-address", 1, {}, &error), nullptr);
  EXPECT_EQ(error, -EINVAL);
  EXPECT_EQ(evrdma::Stream::shutdownWrite(nullptr), -EINVAL);
}

TEST_F(StreamTest, ASlowReaderHoldsTheWriterBackInTheWritersOwnOutputBuffer) {
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  const uint64_t total = 16u << 20;
  Side reader(0, 0, 1), writer(1, 0, 2);  // the writer writes by hand, below
  writer.shutDownWhenSent = false;
  reader.shutDownWhenSent = false;
  SidePairs pairs(reactor, bed, {&reader}, {&reader}, options);  // the reader reads nothing for now
  ASSERT_TRUE(pairs.open(writer));
  bufferevent* const bev = writer.bev;
  bufferevent* const readerBev = reader.bev;
  // All of it written at once: what the reader's side can hold is its receive window, its
  // receive buffers, and the writer's own buffers; the rest must stay in the writer's output.
  std::vector<uint8_t> all(total);
  for (uint64_t i = 0; i < total; ++i) all[i] = patternByte(i, 1);
  bufferevent_write(bev, all.data(), all.size());
  const evrdma::StreamOptions& defaults = options.stream;
  const uint64_t inFlightBound = defaults.receiveWindow + defaults.sendWindow + (16u << 10) +
                                 uint64_t{defaults.connection.recvDepth + defaults.connection.sendDepth} *
                                     defaults.connection.maxMessageSize * 2;
  // Wait until the reader's window is full and the writer's stream can send nothing more (every
  // send buffer holds a message waiting for the reader's credits): from then on nothing moves.
  evrdma::StreamStats writerStats, readerStats;
  const bool stalled = runUntil(reactor, [&] {
    return evrdma::Stream::stats(bev, writerStats) == 0 && evrdma::Stream::stats(readerBev, readerStats) == 0 &&
           writerStats.waitingForPeer && readerStats.receivingPaused;
  }, 60s);
  EXPECT_TRUE(stalled) << "writer waiting " << writerStats.waitingForPeer << ", reader paused "
                       << readerStats.receivingPaused << ", reader holds " << readerStats.heldForProgram;
  EXPECT_EQ(reader.received, 0u);
  EXPECT_GE(writerStats.connection.creditWaits, 1u);
  const size_t held = evbuffer_get_length(bufferevent_get_output(bev));
  EXPECT_GE(held, total - inFlightBound) << "the writer's own output holds only " << held << " of " << total;
  EXPECT_LE(readerStats.heldForProgram, defaults.receiveWindow + defaults.connection.maxMessageSize)
      << "the reader buffered past its window";
  // Reading again, the reader gets every byte.
  bufferevent_enable(readerBev, EV_READ);
  EXPECT_TRUE(runUntil(reactor, [&] { return reader.received == total; }, 300s)) << reader.received;
  EXPECT_EQ(reader.firstBad, UINT64_MAX);
  bufferevent_free(bev);
  bufferevent_free(readerBev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// Over TCP, what a program wrote before it closed waits in its peer's socket until the peer reads
// it, then EOF, however long the peer took to read: the close does not take it back. Here the
// reader reads nothing while its writer writes past the reader's receive window (the rest waits in
// the reader's receive buffers, its receiving paused), frees its end at once, and its connection
// closes once its FIN was sent; only then does the reader read again: every byte, then EOF, no
// error. (Its connection dropped what it held when the peer disconnected: a proxy's client lost
// the tail of an answer.)
TEST_F(StreamTest, BytesHeldWhileTheReaderDidNotReadReachItAfterItsWriterFreedItsEndAndDisconnected) {
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  const evrdma::StreamOptions& defaults = options.stream;
  // Past the window by half the receive buffers: all of it fits in what the reader takes in.
  const uint64_t total = defaults.receiveWindow + defaults.connection.recvDepth / 2 * defaults.connection.maxMessageSize;
  for (const bool halfCloseFirst : {false, true}) {
    SCOPED_TRACE(halfCloseFirst ? "shutdownWrite, then free" : "free");
    Side reader(0, 0, 1), writer(1, 0, 2);
    writer.shutDownWhenSent = false;
    reader.shutDownWhenSent = false;
    SidePairs pairs(reactor, bed, {&reader}, {&reader}, options);  // the reader reads nothing for now
    ASSERT_TRUE(pairs.open(writer));
    std::vector<uint8_t> all(total);
    for (uint64_t i = 0; i < total; ++i) all[i] = patternByte(i, 1);
    bufferevent_write(writer.bev, all.data(), all.size());
    if (halfCloseFirst) {
      EXPECT_EQ(evrdma::Stream::shutdownWrite(writer.bev), 0);
    }
    bufferevent_free(writer.bev);
    writer.bev = nullptr;
    // The writer's connection closes once its FIN went out: the reader's connection ends with it.
    evrdma::StreamStats stats;
    ASSERT_TRUE(runUntil(reactor, [&] {
      return evrdma::Stream::stats(reader.bev, stats) == 0 && !stats.connected && stats.connection.messagesReceived > 0;
    }, 60s)) << "the reader's connection still up; it holds " << stats.heldForProgram;
    EXPECT_EQ(reader.received, 0u);
    bufferevent_enable(reader.bev, EV_READ);
    EXPECT_TRUE(runUntil(reactor, [&] { return reader.eofAt != UINT64_MAX || reader.error != 0; }, 60s));
    EXPECT_EQ(reader.received, total);
    EXPECT_EQ(reader.eofAt, total) << "EOF after " << reader.eofAt << " bytes of " << total;
    EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;
    EXPECT_EQ(reader.error, 0) << strerror(reader.error);
    bufferevent_free(reader.bev);
    EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  }
}

// A reader that stops reading stalls its own stream and nothing else: while stream A waits with its
// reader's window full and its writer's send buffers spent, A's connections send no more than
// what was on its way (no frame traded in a loop to wait), and a second stream on the same
// Reactor moves all its bytes. Its rate beside the stalled stream, against its rate alone, is
// printed: a figure, never the proof.
TEST_F(StreamTest, AStalledReaderStallsOnlyItsOwnStreamASecondOneMovesEveryByteMeanwhile) {
  const uint64_t total = evrdma::test::lightStress() ? (4u << 20) : (32u << 20);
  const uint64_t stalledBytes = 16u << 20;
  evrdma::Reactor reactor;
  Side stalledWriter(1, stalledBytes, 3), stalledReader(0, 0, 4);
  stalledWriter.shutDownWhenSent = false;
  stalledReader.shutDownWhenSent = false;
  Side aloneWriter(1, total, 5), aloneReader(0, 0, 6), besideWriter(1, total, 7), besideReader(0, 0, 8);
  // In the order they connect; stream A's reader reads nothing from the start (its writer writes
  // once connected).
  SidePairs pairs(reactor, bed, {&stalledReader, &besideReader, &aloneReader}, {&stalledReader});
  // How long `writer` takes to move `total` bytes to `reader` (each checked), EOF included.
  auto transfer = [&](Side& writer, Side& reader) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(pairs.open(writer));
    const bool done = runUntil(reactor, [&] { return reader.received == total && reader.eofAt != UINT64_MAX; }, 600s);
    EXPECT_TRUE(done) << "received " << reader.received << " of " << total << ", errors " << writer.error << " / "
                      << reader.error;
    EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  // Stream A: its reader reads nothing, its writer writes 16 MiB, until neither side can move.
  ASSERT_TRUE(pairs.open(stalledWriter));
  evrdma::StreamStats writerStats, readerStats;
  ASSERT_TRUE(runUntil(reactor, [&] {
    return evrdma::Stream::stats(stalledWriter.bev, writerStats) == 0 &&
           evrdma::Stream::stats(stalledReader.bev, readerStats) == 0 && writerStats.waitingForPeer &&
           readerStats.receivingPaused;
  }, 60s)) << "stream A never stalled";
  const evrdma::ConnectionStats writerBefore = writerStats.connection, readerBefore = readerStats.connection;

  const double besideSeconds = transfer(besideWriter, besideReader);
  ASSERT_EQ(evrdma::Stream::stats(stalledWriter.bev, writerStats), 0);
  ASSERT_EQ(evrdma::Stream::stats(stalledReader.bev, readerStats), 0);
  EXPECT_TRUE(writerStats.waitingForPeer && readerStats.receivingPaused) << "stream A moved meanwhile";
  EXPECT_EQ(stalledReader.received, 0u);
  // What was on its way when A stalled may still land (on siw a credit return was, once: three
  // more messages went): at most a receive ring's worth each way. A wait traded in a loop would
  // send a frame per turn for as long as the 32 MiB took.
  const uint64_t inFlight = evrdma::StreamOptions{}.connection.recvDepth;
  auto framesSent = [](const evrdma::ConnectionStats& s) { return s.messagesSent + s.creditFramesSent; };
  const uint64_t writerSent = framesSent(writerStats.connection) - framesSent(writerBefore);
  const uint64_t readerSent = framesSent(readerStats.connection) - framesSent(readerBefore);
  std::printf("[ figures  ] while the second stream moved its bytes, stalled stream A's writer sent %llu frames, "
              "its reader %llu\n",
              static_cast<unsigned long long>(writerSent), static_cast<unsigned long long>(readerSent));
  EXPECT_LE(writerSent, inFlight) << "the stalled writer's connection kept sending";
  EXPECT_LE(readerSent, inFlight) << "the stalled reader's connection kept sending";

  // The same transfer with stream A gone out of the way: the rate to compare with.
  bufferevent_enable(stalledReader.bev, EV_READ);
  EXPECT_TRUE(runUntil(reactor, [&] { return stalledReader.received == stalledBytes; }, 300s))
      << stalledReader.received << " of stream A's " << stalledBytes << " bytes";
  EXPECT_EQ(stalledReader.firstBad, UINT64_MAX);
  const double aloneSeconds = transfer(aloneWriter, aloneReader);
  std::printf("[ figures  ] %llu MiB beside a stalled stream: %.3f s (%.0f Mb/s); alone: %.3f s (%.0f Mb/s); "
              "beside / alone rate: %.2f\n",
              static_cast<unsigned long long>(total >> 20), besideSeconds, total * 8 / besideSeconds / 1e6,
              aloneSeconds, total * 8 / aloneSeconds / 1e6, aloneSeconds / besideSeconds);
  for (Side* side : {&stalledWriter, &stalledReader, &aloneWriter, &aloneReader, &besideWriter, &besideReader})
    bufferevent_free(side->bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// A message received while the program reads goes straight into its input evbuffer, past the pair
// and the filter underneath; while it does not read, or its input is at its read high watermark,
// the message takes the long way and waits there within the receive window, and so do the ones
// after it until none is left there. Every byte arrives in order, and EOF after the last.
TEST_F(StreamTest, ReceivedMessagesGoStraightIntoAReadingProgramsInputAndTheLongWayWhileItDoesNotRead) {
  evrdma::Reactor reactor;
  Side reader(0, 0, 1), writer(1, 0, 2);  // the writer writes by hand, below
  writer.shutDownWhenSent = false;
  reader.shutDownWhenSent = false;
  SidePairs pairs(reactor, bed, {&reader});
  ASSERT_TRUE(pairs.open(writer));
  bufferevent* const bev = writer.bev;
  bufferevent* const readerBev = reader.bev;
  constexpr size_t kMessage = 1000;
  constexpr uint64_t kCount = 20;
  auto writeOne = [&] { writer.writePattern(kMessage); };  // one message
  evrdma::StreamStats stats;
  auto straightIn = [&] { return evrdma::Stream::stats(readerBev, stats) == 0 ? stats.messagesStraightIn : ~0ull; };

  // Reading: each message goes straight in.
  for (uint64_t i = 0; i < kCount; ++i) {
    writeOne();
    ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  }
  EXPECT_EQ(straightIn(), kCount);

  // Not reading: the long way, where they wait (as one message or more); the program gets none.
  bufferevent_disable(readerBev, EV_READ);
  for (uint64_t i = 0; i < kCount; ++i) writeOne();
  EXPECT_TRUE(runUntil(reactor, [&] {
    return evrdma::Stream::stats(readerBev, stats) == 0 && stats.heldForProgram == kCount * kMessage;
  }, 60s)) << "held for the program: " << stats.heldForProgram;
  EXPECT_EQ(reader.received, kCount * kMessage) << "bytes reached a program that does not read";
  EXPECT_EQ(stats.messagesStraightIn, kCount);
  // Reading again: the waiting bytes, then straight in again.
  bufferevent_enable(readerBev, EV_READ);
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  writeOne();
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  EXPECT_EQ(straightIn(), kCount + 1);

  // Reading but not draining, with a read high watermark of two messages: two go straight in, the
  // rest wait on the long way; the program's input never holds more than its watermark.
  bufferevent_setcb(readerBev, [](bufferevent*, void*) {}, nullptr, Side::onEvent, &reader);
  bufferevent_setwatermark(readerBev, EV_READ, 0, 2 * kMessage);
  evbuffer* readerInput = bufferevent_get_input(readerBev);
  for (uint64_t i = 1; i <= 5; ++i) {  // one message at a time (writes in one turn would be one)
    writeOne();
    ASSERT_TRUE(runUntil(reactor, [&] {
      return evrdma::Stream::stats(readerBev, stats) == 0 &&
             evbuffer_get_length(readerInput) + stats.heldForProgram == i * kMessage;
    }, 60s)) << "message " << i << ": the program's input " << evbuffer_get_length(readerInput) << ", held "
             << stats.heldForProgram;
    EXPECT_LE(evbuffer_get_length(readerInput), 2 * kMessage) << "past the program's read high watermark";
  }
  EXPECT_EQ(stats.heldForProgram, 3 * kMessage);
  EXPECT_EQ(evbuffer_get_length(readerInput), 2 * kMessage);
  EXPECT_EQ(stats.messagesStraightIn, kCount + 3);
  // Draining: every byte in order.
  bufferevent_setwatermark(readerBev, EV_READ, 0, 0);
  reader.attach(readerBev);
  Side::onRead(readerBev, &reader);
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;

  // The writer frees its end: EOF after the last byte.
  writeOne();
  bufferevent_free(bev);
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.eofAt != UINT64_MAX; }, 60s));
  EXPECT_EQ(reader.eofAt, writer.sent);
  EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;
  bufferevent_free(readerBev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// What a program writes leaves straight from its output evbuffer, once its callback has returned,
// while it may write: with a write timeout set it goes the long way through the pair (the filter
// restarts the timeout as bytes pass), and so does a bulk write; written just before writing is
// disabled it stays in the program's output (a second stream on the same Reactor moves a message
// meanwhile). Every byte arrives in order.
TEST_F(StreamTest, WhatAProgramWritesLeavesStraightFromItsOutputWhileItMayWriteAndTheLongWayWithATimeoutOrInBulkInWholeChains) {
  evrdma::Reactor reactor;
  Side reader(0, 0, 1), writer(1, 0, 2), markReader(0, 0, 3), markWriter(1, 0, 4);
  for (Side* side : {&reader, &writer, &markReader, &markWriter}) side->shutDownWhenSent = false;
  SidePairs pairs(reactor, bed, {&reader, &markReader});
  ASSERT_TRUE(pairs.open(writer));
  ASSERT_TRUE(pairs.open(markWriter));
  constexpr size_t kMessage = 1000;
  constexpr uint64_t kCount = 10;
  auto writeOne = [&] { writer.writePattern(kMessage); };  // one message
  evrdma::StreamStats stats;
  auto straightOut = [&] { return evrdma::Stream::stats(writer.bev, stats) == 0 ? stats.messagesStraightOut : ~0ull; };
  auto sendAll = [&](uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      writeOne();
      ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
    }
  };

  // Writing: straight out.
  sendAll(kCount);
  EXPECT_EQ(straightOut(), kCount);
  // With a write timeout: the long way.
  const timeval minute{60, 0};
  bufferevent_set_timeouts(writer.bev, nullptr, &minute);
  sendAll(kCount);
  EXPECT_EQ(straightOut(), kCount) << "taken straight with a write timeout set";
  bufferevent_set_timeouts(writer.bev, nullptr, nullptr);
  sendAll(kCount);
  EXPECT_EQ(straightOut(), 2 * kCount);
  // A bulk write (past 16 KiB in the program's output): the long way, in its evbuffer chain moved
  // whole (it fits the send window), not copied down in pieces; one past the window is cut.
  ASSERT_NE(straightOut(), ~0ull);
  const uint64_t wholeBefore = stats.bytesWrittenDownWhole;
  writer.writePattern(64 << 10);
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  EXPECT_EQ(straightOut(), 2 * kCount) << "a bulk write was taken straight";
  EXPECT_EQ(stats.bytesWrittenDownWhole - wholeBefore, 64u << 10) << "copied down in pieces";
  const size_t pastTheWindow = evrdma::StreamOptions{}.sendWindow * 4;
  writer.writePattern(pastTheWindow);
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  ASSERT_NE(straightOut(), ~0ull);
  EXPECT_LT(stats.bytesWrittenDownWhole - wholeBefore, (64u << 10) + pastTheWindow)
      << "a chain past the send window went down whole";
  sendAll(1);  // and the next small one straight again
  EXPECT_EQ(straightOut(), 2 * kCount + 1);

  // Written, then writing disabled in the same turn: it stays in the program's output (as over a
  // socket) while the other stream moves a message.
  writeOne();
  bufferevent_disable(writer.bev, EV_WRITE);
  const uint64_t before = reader.received;
  const uint8_t mark[16] = {};
  bufferevent_write(markWriter.bev, mark, sizeof mark);
  ASSERT_TRUE(runUntil(reactor, [&] { return markReader.received == sizeof mark; }, 60s));
  EXPECT_EQ(reader.received, before) << "bytes left a program that had disabled writing";
  EXPECT_EQ(evbuffer_get_length(bufferevent_get_output(writer.bev)), kMessage);
  // Enabled again, they go (with no write: see bufferevent_conformance), and the next write after them.
  bufferevent_enable(writer.bev, EV_WRITE);
  writeOne();
  ASSERT_TRUE(runUntil(reactor, [&] { return reader.received == writer.sent; }, 60s)) << reader.received;
  EXPECT_EQ(reader.firstBad, UINT64_MAX) << "a wrong byte at " << reader.firstBad;
  for (Side* side : {&reader, &writer, &markReader, &markWriter}) bufferevent_free(side->bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// "Established 2, Disconnecting 1": the states that hold connections (a failure message says).
std::string countsByState(const evrdma::ConnectionCounts& counts) {
  std::string out;
  for (size_t i = 0; i < evrdma::kConnectionStates; ++i) {
    if (counts.byState[i] == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(evrdma::toString(static_cast<evrdma::ConnectionState>(i))) + " " + std::to_string(counts.byState[i]);
  }
  return out.empty() ? "none" : out;
}

// A field of /proc/self/status, in KiB (VmRSS, VmPin).
uint64_t statusKiB(const char* field) {
  std::ifstream status("/proc/self/status");
  const size_t length = std::strlen(field);
  for (std::string line; std::getline(status, line);)
    if (line.compare(0, length, field) == 0 && line.size() > length && line[length] == ':')
      return std::stoull(line.substr(length + 1));
  return 0;
}

// A thousand streams open at once on one Reactor (both their ends in this process: two thousand
// connections), each carrying a line there and back, then idle, then freed: every one is served,
// and nothing is left. The memory an idle stream holds, with small buffers (4 KiB messages, 8
// receives, 4 sends), is printed: a figure. soft-iWARP holds about 70 queue pairs per process:
// there 30 streams.
TEST_F(StreamTest, AThousandStreamsOpenAtOnceOnOneReactorAreEachServedThenAllClose) {
  const size_t streams = evrdma::test::onIwarp() ? 30 : evrdma::test::lightStress() ? 100 : 1000;
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  evrdma::StreamOptions& small = options.stream;
  small.connection.maxMessageSize = 4096;
  small.connection.recvDepth = 8;
  small.connection.sendDepth = 4;
  small.lendingBuffers = 8;
  small.receiveWindow = 64 << 10;
  small.sendWindow = 16 << 10;
  size_t serverEnds = 0, serverEndsFreed = 0;
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    ++serverEnds;
    bufferevent_setcb(
        bev, [](bufferevent* b, void*) { bufferevent_write_buffer(b, bufferevent_get_input(b)); }, nullptr,
        [](bufferevent* b, short what, void* freed) {
          if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
            ++*static_cast<size_t*>(freed);
            bufferevent_free(b);
          }
        },
        &serverEndsFreed);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  // Before the first stream: what the device's first connection sets up for all (its protection
  // domain, channel, shared CQs) counts in the figures, spread over every stream.
  const uint64_t rssBefore = statusKiB("VmRSS"), pinnedBefore = statusKiB("VmPin");
  const uint64_t registeredBefore = reactor.registeredMemory();

  struct Client {
    bufferevent* bev = nullptr;
    bool echoed = false;
    int error = 0;
  };
  std::vector<Client> clients(streams);
  size_t echoed = 0, failed = 0;
  struct Context {
    Client* client;
    size_t* echoed;
    size_t* failed;
  };
  std::vector<Context> contexts(streams);
  for (size_t i = 0; i < streams; ++i) {
    contexts[i] = {&clients[i], &echoed, &failed};
    clients[i].bev = evrdma::Stream::connect(reactor, bed.ip, listener->port(), small);
    ASSERT_NE(clients[i].bev, nullptr) << "stream " << i;
    bufferevent_setcb(
        clients[i].bev,
        [](bufferevent* b, void* self) {
          auto* context = static_cast<Context*>(self);
          char* line = evbuffer_readln(bufferevent_get_input(b), nullptr, EVBUFFER_EOL_LF);
          if (line == nullptr) return;
          if (!context->client->echoed && std::strcmp(line, "hello") == 0) {
            context->client->echoed = true;
            ++*context->echoed;
          }
          std::free(line);
        },
        nullptr,
        [](bufferevent* b, short what, void* self) {
          auto* context = static_cast<Context*>(self);
          if (what & BEV_EVENT_CONNECTED) bufferevent_write(b, "hello\n", 6);
          if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
            context->client->error = EVUTIL_SOCKET_ERROR();
            ++*context->failed;
          }
        },
        &contexts[i]);
    bufferevent_enable(clients[i].bev, EV_READ | EV_WRITE);
  }
  const bool served = runUntil(reactor, [&] { return echoed + failed == streams; }, 600s);
  std::string errors;
  for (size_t i = 0; i < streams && errors.size() < 400; ++i)
    if (clients[i].error != 0) errors += " " + std::to_string(i) + ": " + strerror(clients[i].error) + ";";
  EXPECT_TRUE(served) << echoed << " echoed, " << failed << " failed of " << streams;
  EXPECT_EQ(echoed, streams) << "failed:" << errors;
  EXPECT_EQ(serverEnds, streams);
  const uint64_t rss = statusKiB("VmRSS"), pinned = statusKiB("VmPin");
  const uint64_t registered = reactor.registeredMemory();
  std::printf("[ figures  ] %zu idle streams on one Reactor (both ends here; 4 KiB messages, 8 receives, 8 spares, 4 sends): "
              "per stream end %.1f KiB resident, %.1f KiB pinned, %.1f KiB registered by evrdma\n",
              streams, (rss - rssBefore) / (2.0 * streams), (pinned - pinnedBefore) / (2.0 * streams),
              (registered - registeredBefore) / 1024.0 / (2.0 * streams));
  for (Client& client : clients) bufferevent_free(client.bev);
  EXPECT_TRUE(runUntil(reactor, [&] { return serverEndsFreed == streams && evrdma::test::noConnectionsLeft(reactor); },
                       300s))
      << serverEndsFreed << " of " << streams << " server ends freed";
}

// This process's lines of `rdma res show <what>`. A read can miss lines while other processes'
// resources come and go (another test's, at ctest -j2): the kernel dumps them in parts and resumes
// each part by position, so an entry removed before ours shifts ours past the resume point (the
// tool still exits 0). So read until two successful reads in a row agree; a failed one is no
// reading. Empty, with the failure said, if they never do.
std::string resourceLinesOfThisProcess(const std::string& what) {
  const std::string pid = " pid " + std::to_string(getpid()) + " ";
  std::string previous;
  bool havePrevious = false;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string lines;
    FILE* out = popen(("rdma res show " + what + " 2>/dev/null").c_str(), "r");
    if (out == nullptr) break;
    char line[1024];
    while (std::fgets(line, sizeof line, out) != nullptr)
      if (std::strstr(line, pid.c_str()) != nullptr) lines += line;
    if (pclose(out) != 0) continue;
    if (havePrevious && lines == previous) return lines;
    previous = std::move(lines);
    havePrevious = true;
  }
  ADD_FAILURE() << "`rdma res show " << what << "` gave no two equal readings in 100";
  return {};
}

// A cycle's server end that never heard its client's bytes or end: what its stream says.
std::string whereTheServersEndIs(bufferevent* end) {
  if (end == nullptr) return "the server's end was freed";
  evrdma::StreamStats stats;
  if (evrdma::Stream::stats(end, stats) != 0) return "the server's end has no stream";
  const evrdma::ConnectionStats& c = stats.connection;
  return "the server's stream: connected " + std::to_string(stats.connected) + ", receiving paused " +
         std::to_string(stats.receivingPaused) + ", held for the program " + std::to_string(stats.heldForProgram) +
         ", messages received " + std::to_string(c.messagesReceived) + " (" + std::to_string(c.bytesReceived) +
         " B), sent " + std::to_string(c.messagesSent) + ", credit frames sent " + std::to_string(c.creditFramesSent) +
         ", credit waits " + std::to_string(c.creditWaits) + ", flushed " + std::to_string(c.flushedCompletions) +
         ", input " + std::to_string(evbuffer_get_length(bufferevent_get_input(end))) + " B, enabled " +
         std::to_string(bufferevent_get_enabled(end));
}

// What this process holds: open fds, pinned memory (VmPin, KiB), and per kind of RDMA resource
// the device's count of those that are this process's.
std::string heldByThisProcess() {
  std::string held = "fds " + std::to_string(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                                            std::filesystem::directory_iterator{}));
  held += ", pinned " + std::to_string(statusKiB("VmPin")) + " KiB";
  for (const char* kind : {"pd", "cq", "qp", "mr", "cm_id"}) {
    const std::string lines = resourceLinesOfThisProcess(kind);
    held += std::string(", ") + kind + " " + std::to_string(std::count(lines.begin(), lines.end(), '\n'));
  }
  return held;
}

// A thousand streams connected, written to and freed, one after another, each read whole by the
// server, which frees its end at EOF: afterwards the process holds what it held after the first.
// On siw 25: a process's device context there keeps the pages of every queue pair it ever made
// (docs/limitations.md), and refuses new ones after about 124, destroyed or not.
TEST_F(StreamTest, AThousandConnectWriteFreeCyclesLeaveFdsPinnedMemoryAndRdmaResourcesAsTheyWere) {
  evrdma::Reactor reactor;
  const int cycles = evrdma::test::onIwarp() ? 25 : evrdma::test::lightStress() ? 50 : 1000;
  const std::string payload(4096, 'p');
  uint64_t heardTotal = 0;
  int serverEnds = 0;
  struct Server {
    uint64_t* heard;
    int* ends;
    bufferevent* current = nullptr;  // the cycle's end, until freed (a failed cycle says where it is)
  } server{&heardTotal, &serverEnds};
  auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
    server.current = bev;
    bufferevent_setcb(
        bev,
        [](bufferevent* b, void* arg) {
          evbuffer* input = bufferevent_get_input(b);
          *static_cast<Server*>(arg)->heard += evbuffer_get_length(input);
          evbuffer_drain(input, evbuffer_get_length(input));
        },
        nullptr,
        [](bufferevent* b, short what, void* arg) {
          if ((what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) == 0) return;
          auto* self = static_cast<Server*>(arg);
          ++*self->ends;
          self->current = nullptr;
          bufferevent_free(b);
        },
        &server);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  });
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  struct Client {
    const std::string* payload;
    short events = 0;  // what the cycle's client heard (a failed cycle says)
    int error = 0;
  } client{&payload};
  // The loop's longest pause: no call may block it. rdma_destroy_id did, for a minute, waiting for
  // a REP Linux's CM kept retrying (an agent that told the CM its client was heard before the RTU,
  // when the client's DREQ came first: 1 run in 4 here, three at a time). A cycle can still end
  // in time after such a pause, so the pause itself is checked (a bound on a hang, not a speed).
  auto lastTick = std::chrono::steady_clock::now();
  std::chrono::duration<double> longestPause{0};
  auto notePause = [&] {
    const auto now = std::chrono::steady_clock::now();
    longestPause = std::max<std::chrono::duration<double>>(longestPause, now - lastTick);
    lastTick = now;
  };
  evrdma::Timer pauses(reactor, notePause);
  pauses.startPeriodic(std::chrono::milliseconds(10));
  auto cycle = [&](int i) {
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr) << "cycle " << i;
    client.events = 0;
    client.error = 0;
    bufferevent_setcb(
        bev, nullptr, nullptr,
        [](bufferevent* b, short what, void* arg) {
          auto* self = static_cast<Client*>(arg);
          self->events = what;
          if (what & BEV_EVENT_CONNECTED) {
            bufferevent_write(b, self->payload->data(), self->payload->size());
          } else {
            self->error = EVUTIL_SOCKET_ERROR();
            std::printf("cycle's stream ended: events 0x%x, %s\n", what, strerror(self->error));
          }
          bufferevent_free(b);  // what was written goes first, then the FIN
        },
        &client);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    const bool ended = runUntil(reactor, [&] { return serverEnds == i + 1; }, 60s);
    notePause();  // (a pause that ended the wait was not seen by the timer)
    ASSERT_TRUE(ended)
        << "cycle " << i << ": the client heard events 0x" << std::hex << client.events << std::dec << " ("
        << strerror(client.error) << "), accepted " << listener->accepted() << ", server ends " << serverEnds
        << ", bytes heard " << heardTotal << ", connections by state " << countsByState(reactor.stats().connections)
        << "; " << whereTheServersEndIs(server.current) << "; CM events dispatched " << reactor.cmEventStats().dispatched
        << ", waiting " << reactor.cmEventStats().waiting << "; the loop's longest pause " << longestPause.count()
        << " s; queue pairs:\n" << resourceLinesOfThisProcess("qp");
  };
  cycle(0);
  ASSERT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  const std::string idle = heldByThisProcess(), idleRegions = resourceLinesOfThisProcess("mr -d");
  const uint64_t idleRegistered = reactor.registeredMemory();
  lastTick = std::chrono::steady_clock::now();  // (reading the idle figures took a while)
  for (int i = 1; i <= cycles; ++i) {
    cycle(i);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(heardTotal, static_cast<uint64_t>(cycles + 1) * payload.size());
  EXPECT_LT(longestPause.count(), 30) << "the loop stood still for " << longestPause.count() << " s";
  ASSERT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  // The kernel frees a QP's resources as its process lets go of them: wait for them, with a bound.
  std::string after;
  runUntil(reactor, [&] { return (after = heldByThisProcess()) == idle; }, 30s);
  EXPECT_EQ(after, idle) << "after " << cycles << " cycles; this process's regions then:\n"
                        << idleRegions << "and now:\n" << resourceLinesOfThisProcess("mr -d") << "registered by evrdma: " << idleRegistered
                        << " B then, " << reactor.registeredMemory() << " B now";
  std::printf("idle after the first cycle: %s\nidle after %d more:        %s\n", idle.c_str(), cycles, after.c_str());
}

TEST_F(StreamTest, TheReactorDestroyedWithStreamsOpenTellsEachProgramEshutdownAndTheirFreeLeaksNothing) {
  event_base* base = event_base_new();
  ASSERT_NE(base, nullptr);
  Side server(0, 1 << 20, 1), client(1, 1 << 20, 2);
  server.shutDownWhenSent = client.shutDownWhenSent = false;
  {
    evrdma::Reactor reactor(base);
    auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
      server.attach(bev);
      server.startWriting();
    });
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr);
    client.attach(bev);
    // Both up and moving bytes when the Reactor goes.
    ASSERT_TRUE(runUntil(reactor, [&] { return client.received > 0 && server.received > 0; }, 60s));
  }
  // The programs' ends outlive the Reactor: each hears why, from its own loop.
  struct timeval turn = {0, 0};
  for (int i = 0; i < 100 && (client.error == 0 || server.error == 0); ++i) {
    event_base_loopexit(base, &turn);
    event_base_dispatch(base);
  }
  EXPECT_EQ(client.error, ESHUTDOWN) << strerror(client.error);
  EXPECT_EQ(server.error, ESHUTDOWN) << strerror(server.error);
  EXPECT_FALSE(evrdma::Stream::isStream(nullptr));
  bufferevent_free(client.bev);
  bufferevent_free(server.bev);
  event_base_loopexit(base, &turn);
  event_base_dispatch(base);  // libevent's finalizers run: the streams go with them
  event_base_free(base);
}

// What a stream receives reaches the program's input in the receive buffers themselves (lent with
// evbuffer_add_reference), each posted again once the program drains it: random-sized writes
// arrive whole, at most 5 % of the bytes copied on the way (the messages under lendFrom), and
// no buffer is still lent once everything is read. With lendFrom = SIZE_MAX every byte is copied.
TEST_F(StreamTest, ReceivedBytesReachTheProgramInTheirReceiveBuffersEachPostedAgainOnceDrained) {
  const uint64_t total = evrdma::test::lightStress() ? (4u << 20) : (32u << 20);
  for (const bool lending : {true, false}) {
    SCOPED_TRACE(lending ? "lending" : "lendFrom = SIZE_MAX");
    evrdma::Reactor reactor;
    evrdma::StreamListenerOptions options;
    if (!lending) options.stream.lendFrom = SIZE_MAX;
    Side reader(0, 0, 1), writer(1, total, 2);
    reader.shutDownWhenSent = writer.shutDownWhenSent = false;
    bufferevent* readerBev = nullptr;
    auto listener = evrdma::StreamListener::create(reactor, [&](bufferevent* bev, const sockaddr*, int) {
      readerBev = bev;
      reader.attach(bev);
    }, options);
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr);
    writer.attach(bev);
    EXPECT_TRUE(runUntil(reactor, [&] { return reader.received == total; }, 300s)) << reader.received;
    EXPECT_EQ(reader.firstBad, UINT64_MAX);
    evrdma::StreamStats stats;
    ASSERT_EQ(evrdma::Stream::stats(readerBev, stats), 0);
    EXPECT_EQ(stats.bytesLent + stats.bytesCopied, total);
    EXPECT_EQ(stats.buffersLent, 0u) << "a drained buffer was not given back";
    if (lending) {
      EXPECT_LE(stats.bytesCopied, total / 20) << "copied " << stats.bytesCopied << " of " << total;
      std::printf("lent %llu B, copied %llu B of %llu (%.4f copied)\n", static_cast<unsigned long long>(stats.bytesLent),
                  static_cast<unsigned long long>(stats.bytesCopied), static_cast<unsigned long long>(total),
                  static_cast<double>(stats.bytesCopied) / static_cast<double>(total));
    } else {
      EXPECT_EQ(stats.bytesLent, 0u);
    }
    bufferevent_free(bev);
    bufferevent_free(readerBev);
    EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  }
}

// A program that reads whole lines only (evbuffer_readln) keeps a partial line in its input: the
// receive buffers lent into it stay lent. Once every spare buffer is lent the bytes are copied,
// and a line far longer than all the receive buffers together still arrives (had a lent buffer
// held its receive, the peer would have run out of credits with the line half sent, and waited
// for ever).
TEST_F(StreamTest, AProgramKeepingAPartialLineLongerThanItsReceiveBuffersStillGetsTheWholeLine) {
  evrdma::Reactor reactor;
  evrdma::StreamListenerOptions options;
  const size_t lineLength = size_t{4} << 20;  // 64 messages of 64 KiB, 16 receive buffers
  struct Lines {
    std::vector<size_t> lengths;
    uint32_t mostLent = 0;
  } lines;
  bufferevent* readerBev = nullptr;
  auto listener = readingListener(
      reactor, readerBev,
      [](bufferevent* b, void* arg) {
        auto* seen = static_cast<Lines*>(arg);
        evrdma::StreamStats now;
        if (evrdma::Stream::stats(b, now) == 0) seen->mostLent = std::max(seen->mostLent, now.buffersLent);
        size_t length = 0;
        while (char* line = evbuffer_readln(bufferevent_get_input(b), &length, EVBUFFER_EOL_LF)) {
          seen->lengths.push_back(length);
          free(line);
        }
      },
      &lines, options);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
  ASSERT_NE(bev, nullptr);
  std::string line(lineLength, 'x');
  line += '\n';
  bufferevent_write(bev, line.data(), line.size());
  const bool whole = runUntil(reactor, [&] { return !lines.lengths.empty(); }, 120s);
  evrdma::StreamStats stats;
  if (readerBev != nullptr) {
    ASSERT_EQ(evrdma::Stream::stats(readerBev, stats), 0);
  }
  EXPECT_TRUE(whole) << "the reader's input holds " << (readerBev ? evbuffer_get_length(bufferevent_get_input(readerBev)) : 0)
                     << " B of the line, " << stats.buffersLent << " receive buffers lent";
  ASSERT_EQ(lines.lengths.size(), 1u);
  EXPECT_EQ(lines.lengths[0], lineLength);
  const uint32_t spares = options.stream.lendingBuffers;
  EXPECT_GT(lines.mostLent, 0u);
  EXPECT_LE(lines.mostLent, spares);
  EXPECT_GT(stats.bytesCopied, 0u) << "past the bound the bytes are copied";
  EXPECT_EQ(stats.buffersLent, 0u);
  std::printf("at most %u of %u spare buffers lent; lent %llu B, copied %llu B\n", lines.mostLent, spares,
              static_cast<unsigned long long>(stats.bytesLent), static_cast<unsigned long long>(stats.bytesCopied));
  bufferevent_free(bev);
  bufferevent_free(readerBev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

// A program may keep received bytes past its stream: moved into an evbuffer of its own
// (evbuffer_add_buffer moves the lent chains as they are), they stay readable after the stream,
// its connection and the Reactor are gone (the receive ring's memory goes with the last chain).
TEST_F(StreamTest, BytesLentToTheProgramStayReadableAfterItsStreamAndTheReactorAreGone) {
  const uint64_t total = 2u << 20;
  evbuffer* kept = evbuffer_new();
  ASSERT_NE(kept, nullptr);
  evrdma::StreamStats stats;
  {
    evrdma::Reactor reactor;
    Side writer(1, total, 2);
    writer.shutDownWhenSent = false;
    bufferevent* readerBev = nullptr;
    auto listener = readingListener(
        reactor, readerBev,
        [](bufferevent* b, void* to) { evbuffer_add_buffer(static_cast<evbuffer*>(to), bufferevent_get_input(b)); }, kept);
    ASSERT_EQ(listener->listen(bed.ip, 0), 0);
    bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
    ASSERT_NE(bev, nullptr);
    writer.attach(bev);
    ASSERT_TRUE(runUntil(reactor, [&] { return evbuffer_get_length(kept) == total; }, 120s)) << evbuffer_get_length(kept);
    ASSERT_EQ(evrdma::Stream::stats(readerBev, stats), 0);
    EXPECT_GT(stats.buffersLent, 0u) << "the kept bytes hold their receive buffers";
    bufferevent_free(bev);
    bufferevent_free(readerBev);
    EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  }
  EXPECT_GT(stats.bytesLent, 0u);
  std::vector<uint8_t> bytes(total);
  ASSERT_EQ(evbuffer_remove(kept, bytes.data(), bytes.size()), static_cast<int>(total));
  uint64_t firstBad = UINT64_MAX;
  for (uint64_t i = 0; i < total && firstBad == UINT64_MAX; ++i)
    if (bytes[i] != patternByte(i, 1)) firstBad = i;
  EXPECT_EQ(firstBad, UINT64_MAX) << "a kept byte changed after the stream ended";
  evbuffer_free(kept);
}

// Evbuffers may cross threads: a program that hands what it received to another thread frees the
// lent chains there, and their cleanups run there. The buffers still come back to their stream
// (collected on its own thread), which keeps lending them: 16 MiB move through 16 spares with
// nothing copied, and ThreadSanitizer (the tsan stage runs this test) sees no race.
TEST_F(StreamTest, LentBytesFreedOnAnotherThreadStillGoBackToTheirStream) {
  const uint64_t total = evrdma::test::lightStress() ? (4u << 20) : (16u << 20);
  evrdma::Reactor reactor;
  Side writer(1, total, 2);
  writer.shutDownWhenSent = false;
  struct Handoff {
    std::mutex mutex;
    std::condition_variable ready;
    std::vector<evbuffer*> queue;
    bool done = false;
    uint64_t freedBytes = 0;  // under mutex
  } handoff;
  std::thread freer([&handoff] {
    std::unique_lock<std::mutex> lock(handoff.mutex);
    while (true) {
      handoff.ready.wait(lock, [&] { return handoff.done || !handoff.queue.empty(); });
      if (handoff.queue.empty()) return;
      std::vector<evbuffer*> batch;
      batch.swap(handoff.queue);
      lock.unlock();
      uint64_t bytes = 0;
      for (evbuffer* kept : batch) {
        bytes += evbuffer_get_length(kept);
        evbuffer_free(kept);  // the lent chains' cleanups run here, on this thread
      }
      lock.lock();
      handoff.freedBytes += bytes;
    }
  });
  bufferevent* readerBev = nullptr;
  auto listener = readingListener(
      reactor, readerBev,
      [](bufferevent* b, void* arg) {
        auto* to = static_cast<Handoff*>(arg);
        evbuffer* kept = evbuffer_new();
        evbuffer_add_buffer(kept, bufferevent_get_input(b));  // the lent chains move as they are
        std::lock_guard<std::mutex> lock(to->mutex);
        to->queue.push_back(kept);
        to->ready.notify_one();
      },
      &handoff);
  ASSERT_EQ(listener->listen(bed.ip, 0), 0);
  bufferevent* bev = evrdma::Stream::connect(reactor, bed.ip, listener->port());
  ASSERT_NE(bev, nullptr);
  writer.attach(bev);
  const bool all = runUntil(reactor, [&] {
    std::lock_guard<std::mutex> lock(handoff.mutex);
    return handoff.freedBytes == total;
  }, 300s);
  {
    std::lock_guard<std::mutex> lock(handoff.mutex);
    handoff.done = true;
    handoff.ready.notify_one();
  }
  freer.join();
  EXPECT_TRUE(all) << "freed " << handoff.freedBytes << " of " << total;
  evrdma::StreamStats stats;
  ASSERT_NE(readerBev, nullptr);
  ASSERT_EQ(evrdma::Stream::stats(readerBev, stats), 0);
  EXPECT_EQ(stats.bytesLent + stats.bytesCopied, total);
  // The spares lend this much at once; lending more means buffers freed on the other thread came
  // back and were lent again. How much is lent beyond that depends on how fast that thread runs
  // (while it lags, the stream copies), so the proof is "more than once", not a share of the total.
  const evrdma::StreamOptions defaults;
  const uint64_t lentOnce = uint64_t{defaults.lendingBuffers} * defaults.connection.maxMessageSize;
  EXPECT_GT(stats.bytesLent, lentOnce) << "lent " << stats.bytesLent << " (copied " << stats.bytesCopied
                                       << "): the buffers freed on the other thread did not come back as spares";
  EXPECT_EQ(stats.buffersLent, 0u);
  bufferevent_free(bev);
  bufferevent_free(readerBev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
}

}  // namespace
