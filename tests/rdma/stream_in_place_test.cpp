// Streams that send in place, over real RDMA: this program opts in (Stream::useRegisteredMemory,
// before main), so libevent's evbuffer chains are registered memory and a stream sends what the
// program wrote straight from them. Every byte arrives, in order, nearly all of them sent in
// place; a chain's memory is not freed (nor handed to the next write) before its send completed,
// though the peer holds the sends back for credits meanwhile; and memory that is not the heap's
// (the program's own, added with evbuffer_add_reference) is copied, as before, and arrives too.
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "LoopHold.h"
#include "PatternSink.h"
#include "RunUntil.h"
#include "TestBed.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Stream.h"

namespace {

using evrdma::test::runUntil;
using namespace std::chrono_literals;

// Before main, so before anything of libevent's is made (as a program calls it first thing).
const int kOptedIn = evrdma::Stream::useRegisteredMemory();

using evrdma::test::patternByte;
using evrdma::test::Sink;
using evrdma::test::waitOnPeer;

// Writes `bytes` of the pattern from `from` on, in writes of random sizes up to 256 KiB.
void writePattern(bufferevent* bev, uint64_t from, uint64_t bytes, std::mt19937& random) {
  std::vector<uint8_t> chunk;
  for (uint64_t at = from; at < from + bytes;) {
    const size_t size = std::min<uint64_t>(1 + random() % (256 << 10), from + bytes - at);
    chunk.resize(size);
    for (size_t i = 0; i < size; ++i) chunk[i] = patternByte(at + i);
    ASSERT_EQ(bufferevent_write(bev, chunk.data(), size), 0);
    at += size;
  }
}

// Fills its output to kHigh in writes of kWrite, and again from its write callback (set at kLow).
struct RefillingWriter {
  static constexpr size_t kLow = 1 << 20, kHigh = 4 << 20, kWrite = 64 << 10;
  uint64_t total, written = 0;
  std::vector<uint8_t> chunk = std::vector<uint8_t>(kWrite);
  void writeMore(bufferevent* bev) {
    while (written < total && evbuffer_get_length(bufferevent_get_output(bev)) < kHigh) {
      const size_t size = static_cast<size_t>(std::min<uint64_t>(kWrite, total - written));
      for (size_t i = 0; i < size; ++i) chunk[i] = patternByte(written + i);
      if (bufferevent_write(bev, chunk.data(), size) != 0) return;
      written += size;
    }
  }
  // Its low watermark and write callback set on `bev`, and its first fill written.
  void startOn(bufferevent* bev) {
    bufferevent_setwatermark(bev, EV_WRITE, kLow, 0);
    bufferevent_setcb(
        bev, nullptr, [](bufferevent* b, void* arg) { static_cast<RefillingWriter*>(arg)->writeMore(b); }, nullptr, this);
    writeMore(bev);
  }
};

class StreamInPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kOptedIn, 0) << "useRegisteredMemory: " << strerror(-kOptedIn);
    ASSERT_TRUE(evrdma::test::loadTestBed(bed));
    ASSERT_TRUE(peer.valid());
    int listened = -1;
    peer.runAndWait([&] { listened = sink.listen(peer.reactor(), bed.ip); });
    ASSERT_EQ(listened, 0);
  }
  void TearDown() override {
    peer.runAndWait([&] { sink.listener.reset(); });
  }
  // Connects a stream to the sink, once connected.
  bufferevent* connect(evrdma::Reactor& reactor, const evrdma::StreamOptions& options = {}) {
    return evrdma::test::connectedStream(reactor, bed.ip, sink.listener->port(), options);
  }
  // The sink's stream `n` (from 1) read `bytes` intact, then EOF.
  void expectIntact(size_t n, uint64_t bytes) {
    ASSERT_TRUE(waitOnPeer(peer, [&] { return sink.ended(n); }));
    peer.runAndWait([&] {
      const Sink::Stream& got = *sink.streams[n - 1];
      EXPECT_EQ(got.bytes, bytes);
      EXPECT_EQ(got.firstBad, UINT64_MAX) << "a wrong byte at " << got.firstBad;
      EXPECT_TRUE(got.eof) << strerror(got.error);
    });
  }
  static uint64_t sentInPlace(bufferevent* bev) {
    evrdma::StreamStats stats;
    return evrdma::Stream::stats(bev, stats) == 0 ? stats.bytesSentInPlace : 0;
  }
  static uint64_t sent(bufferevent* bev) {
    evrdma::StreamStats stats;
    return evrdma::Stream::stats(bev, stats) == 0 ? stats.connection.bytesSent : 0;
  }

  evrdma::test::TestBed bed;
  evrdma::ReactorThread peer;
  Sink sink;
};

TEST_F(StreamInPlaceTest, WritesOfAnySizeArriveIntactAndNearlyAllAreSentStraightFromTheirChains) {
  const uint64_t total = evrdma::test::lightStress() ? (8u << 20) : (64u << 20);
  evrdma::Reactor reactor;
  bufferevent* bev = connect(reactor);
  ASSERT_NE(bev, nullptr);
  std::mt19937 random(7);
  // In writes of up to 256 KiB, each turn's writes once the previous ones have gone.
  uint64_t written = 0;
  while (written < total) {
    const uint64_t bytes = std::min<uint64_t>(1u << 20, total - written);
    writePattern(bev, written, bytes, random);
    if (::testing::Test::HasFatalFailure()) return;
    written += bytes;
    ASSERT_TRUE(runUntil(reactor, [&] { return evbuffer_get_length(bufferevent_get_output(bev)) == 0; }, 60s));
  }
  ASSERT_TRUE(runUntil(reactor, [&] { return sent(bev) >= total; }, 120s));
  const uint64_t inPlace = sentInPlace(bev);
  std::printf("%llu of %llu bytes sent in place\n", static_cast<unsigned long long>(inPlace),
              static_cast<unsigned long long>(total));
  EXPECT_GE(inPlace, total * 9 / 10) << "the chains were copied";
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));  // the rest, the FIN, the disconnect
  expectIntact(1, total);
}

// A writer as bulk senders are written: it fills its output to a high mark and writes more from its
// write callback, called at its low watermark (as socket bufferevents call it). The stream takes
// the chains straight from that output, and must call the program back as they go, also when a
// chain is taken whole while the bytes already out are all that may be (and none of it is posted
// yet): without that call the writer waits for ever with its output empty.
TEST_F(StreamInPlaceTest, AWriterThatRefillsFromItsWriteCallbackAtALowWatermarkIsCalledBackAsItsChainsGo) {
  const uint64_t total = evrdma::test::lightStress() ? (16u << 20) : (64u << 20);
  evrdma::Reactor reactor;
  bufferevent* bev = connect(reactor);
  ASSERT_NE(bev, nullptr);
  RefillingWriter writer{total};
  writer.startOn(bev);
  ASSERT_TRUE(runUntil(reactor, [&] { return writer.written == total; }, 120s))
      << "the write callback stopped coming: " << writer.written << " of " << total << " written, "
      << evbuffer_get_length(bufferevent_get_output(bev)) << " waiting in the output";
  ASSERT_TRUE(runUntil(reactor, [&] { return sent(bev) >= total; }, 120s));
  evrdma::StreamStats stats;
  ASSERT_EQ(evrdma::Stream::stats(bev, stats), 0);
  std::printf("%llu of %llu bytes sent in place, %llu of %llu messages straight from the program's output\n",
              static_cast<unsigned long long>(stats.bytesSentInPlace), static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(stats.messagesStraightOut),
              static_cast<unsigned long long>(stats.connection.messagesSent));
  EXPECT_GE(stats.bytesSentInPlace, total * 9 / 10) << "the chains were copied";
  // Bulk too goes straight from the program's output (not copied down the filter and the pair).
  EXPECT_GE(stats.messagesStraightOut, stats.connection.messagesSent * 9 / 10);
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  expectIntact(1, total);
}

// Two writers at once, on two Reactors and threads (two protection domains over the one device),
// from the one heap: its slabs are registered on each domain as each stream first sends from them,
// and neither stream's chains are handed to the other's writes while its sends are out.
TEST_F(StreamInPlaceTest, TwoStreamsOnTwoThreadsSendInPlaceFromTheOneHeapAtOnceEachIntact) {
  const uint64_t total = evrdma::test::lightStress() ? (16u << 20) : (64u << 20);
  // The second writer, on its own thread: it starts writing once connected, as the first does.
  evrdma::ReactorThread other;
  ASSERT_TRUE(other.valid());
  struct Remote {
    RefillingWriter writer;
    bufferevent* bev = nullptr;
  } remote{RefillingWriter{total}};
  other.runAndWait([&] {
    remote.bev = evrdma::Stream::connect(other.reactor(), bed.ip, sink.listener->port());
    if (remote.bev == nullptr) return;
    bufferevent_setwatermark(remote.bev, EV_WRITE, RefillingWriter::kLow, 0);
    bufferevent_setcb(
        remote.bev, nullptr,
        [](bufferevent* b, void* arg) { static_cast<Remote*>(arg)->writer.writeMore(b); },
        [](bufferevent* b, short what, void* arg) {
          if (what & BEV_EVENT_CONNECTED) static_cast<Remote*>(arg)->writer.writeMore(b);
        },
        &remote);
    bufferevent_enable(remote.bev, EV_WRITE);
  });
  ASSERT_NE(remote.bev, nullptr);
  evrdma::Reactor reactor;
  bufferevent* bev = connect(reactor);
  ASSERT_NE(bev, nullptr);
  RefillingWriter writer{total};
  writer.startOn(bev);
  ASSERT_TRUE(runUntil(reactor, [&] { return writer.written == total && sent(bev) >= total; }, 240s))
      << "here " << sent(bev) << " of " << total << " sent";
  ASSERT_TRUE(waitOnPeer(other, [&] { return remote.writer.written == total && sent(remote.bev) >= total; }))
      << "there the stream did not send it all";
  EXPECT_GE(sentInPlace(bev), total * 9 / 10) << "here the chains were copied";
  uint64_t inPlaceThere = 0;
  other.runAndWait([&] { inPlaceThere = sentInPlace(remote.bev); });
  EXPECT_GE(inPlaceThere, total * 9 / 10) << "there the chains were copied";
  bufferevent_free(bev);
  other.runAndWait([&] { bufferevent_free(remote.bev); });
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));
  expectIntact(1, total);
  expectIntact(2, total);
}

// The peer's loop is held: it returns no credit, so of what the stream posts in place, what is past
// the peer's receives waits in the connection for credits. The program writes again meanwhile:
// were the waiting chains freed when posted (not when their sends complete), those new writes
// would take their memory and be sent in their place.
TEST_F(StreamInPlaceTest, AChainsMemoryIsNotReusedBeforeItsSendCompletesWhileTheSendWaitsForCredits) {
  const uint64_t batch = 2u << 20;  // twice the peer's receives (16 of 64 KiB)
  evrdma::StreamOptions options;
  options.sendWindow = batch;  // all of it posted in place at once
  evrdma::Reactor reactor;
  bufferevent* bev = connect(reactor, options);
  ASSERT_NE(bev, nullptr);
  std::mt19937 random(11);
  {
    evrdma::test::LoopHold stopped(peer);
    ASSERT_TRUE(stopped.hold());
    writePattern(bev, 0, batch, random);
    ASSERT_TRUE(runUntil(reactor, [&] { return sentInPlace(bev) >= batch; }, 60s))
        << sentInPlace(bev) << " of " << batch << " bytes posted in place";
    evrdma::StreamStats stats;
    ASSERT_EQ(evrdma::Stream::stats(bev, stats), 0);
    ASSERT_LT(stats.connection.bytesSent, batch) << "nothing waited for credits: the test would prove nothing";
    // New chains, taken from the heap by the writes themselves, while the first batch's wait; they
    // wait in the program's output, as a socket's would with its peer not reading.
    writePattern(bev, batch, batch, random);
    ASSERT_TRUE(runUntil(reactor, [&] { return evrdma::Stream::stats(bev, stats) == 0 && stats.waitingForPeer; }, 60s));
  }
  ASSERT_TRUE(runUntil(reactor, [&] { return sent(bev) >= 2 * batch; }, 120s));
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));  // the rest, the FIN, the disconnect
  expectIntact(1, 2 * batch);
}

// evbuffer_add_reference of the program's own memory: not the heap's, so copied (in place it would
// be sent under no registration: the device would refuse it and the stream fail).
TEST_F(StreamInPlaceTest, TheProgramsOwnMemoryInTheOutputIsCopiedAndArrivesIntact) {
  const uint64_t total = 4u << 20;
  static std::vector<uint8_t> own(total);
  for (uint64_t i = 0; i < total; ++i) own[i] = patternByte(i);
  evrdma::Reactor reactor;
  bufferevent* bev = connect(reactor);
  ASSERT_NE(bev, nullptr);
  for (uint64_t at = 0; at < total; at += 64 << 10)
    ASSERT_EQ(evbuffer_add_reference(bufferevent_get_output(bev), own.data() + at, 64 << 10, nullptr, nullptr), 0);
  ASSERT_TRUE(runUntil(reactor, [&] { return sent(bev) >= total; }, 120s));
  const uint64_t inPlace = sentInPlace(bev);
  std::printf("%llu of %llu bytes of the program's own memory sent in place (copied on the way)\n",
              static_cast<unsigned long long>(inPlace), static_cast<unsigned long long>(total));
  EXPECT_LE(inPlace, total / 4) << "the program's own memory was taken as registered";
  bufferevent_free(bev);
  EXPECT_TRUE(evrdma::test::runUntilNoConnections(reactor));  // the rest, the FIN, the disconnect
  expectIntact(1, total);
}

}  // namespace
