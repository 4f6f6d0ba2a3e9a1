// hostile-stream-peer: attacks evrdma's byte streams (kv-server) and its memory lending the way a
// hostile peer would, with raw librdmacm and verbs speaking evrdma's frames badly, and reports
// how the server answered. tests/hostile/stream_attacks_test.sh runs them while well-behaved
// clients are served alongside.
//   usage: hostile-stream-peer -a ADDR -p PORT [-w MS] [-n COUNT] ATTACK   (-h lists the attacks)
// Exit status 0 when the attack could be made (whatever the server did), 1 when it could not, 2
// on bad usage.
#include <getopt.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "CmFlood.h"
#include "RawPeer.h"

namespace {

using evrdma::hostile::Attack;
using evrdma::hostile::Clock;
using evrdma::hostile::CmFlood;
using evrdma::hostile::frame;
using evrdma::hostile::Peer;
using evrdma::hostile::putBig;

constexpr Attack kAttacks[] = {
    {"no-hello", "-n connections that complete the RDMA handshake and never say the stream's hello, held -w ms (or until the server closed them all)"},
    {"never-reads", "a hello granting 7 credits, 15 messages of 10 000 GET commands, then no credit ever, for -w ms"},
    {"region-request", "a hello, then a request for a 16 KiB region with remote read and write: granted or refused?"},
    {"borrowed-rkey",
     "a blast write-mode peer borrows a region; a second peer writes to its address and rkey; the first reads it back"},
};

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDR -p PORT [-w MS] [-n COUNT] ATTACK\n"
               "Attacks an evrdma stream server (or blast-server, for borrowed-rkey) with raw librdmacm/verbs\n"
               "and prints how it answered.\n"
               "  -a ADDR   server address (numeric)\n"
               "  -p PORT   server port\n"
               "  -w MS     how long to hold the attack (default 10000)\n"
               "  -n COUNT  no-hello: how many connections (default 1000)\n"
               "  -h        this help\n"
               "Attacks:\n",
               prog);
  evrdma::hostile::listAttacks(out, kAttacks, 16);
}

int elapsedMs(Clock::time_point since) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
}

// A hello: the largest message we take and the credits we grant. 32 KiB: a frame is its payload
// and a 16-byte header, and our receives are 64 KiB each.
std::vector<uint8_t> hello(uint16_t credits) { return frame(7, credits, std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0x80, 0}); }

uint64_t getBig(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = value << 8 | in[i];
  return value;
}

// `count` connections completed (RDMA handshake, RTU) on one event channel, each with a QP of its
// own, that never send anything: prints "established K of N ..." as they come, then holds them
// until `waitMs` has passed or the server has closed or refused them all, counting those it closes.
bool noHello(const char* address, const char* port, uint64_t count, int waitMs, std::string& outcome) {
  CmFlood flood(count);
  if (!flood.open(address, port, outcome)) return false;
  constexpr uint64_t kInFlight = 128;  // requests unanswered at once (the server's backlog)
  enum class State : uint8_t { Connecting, Established, Rejected, Failed, Closed };
  std::vector<State> states(count, State::Connecting);
  uint64_t started = 0, established = 0, rejected = 0, failed = 0, closed = 0;
  int firstClosedAt = -1;
  std::string failure, firstReason;
  const auto start = Clock::now();
  const auto fail = [&](uint64_t i, std::string why) {
    if (states[i] != State::Connecting) return;
    states[i] = State::Failed;
    ++failed;
    failure = std::move(why);
  };
  const auto startNext = [&] {
    const uint64_t i = started++;
    std::string why;
    if (!flood.start(i, why)) fail(i, why);
  };
  uint64_t reported = 0;
  while (elapsedMs(start) < waitMs) {
    while (started < count && started - (established + rejected + failed + closed) < kInFlight) startNext();
    CmFlood::Event event;
    if (!flood.next(50, event)) continue;
    const uint64_t i = event.index;
    const rdma_cm_event_type type = event.type;
    if (type == RDMA_CM_EVENT_REJECTED && firstReason.empty()) firstReason = event.rejectReason;
    if (type == RDMA_CM_EVENT_ADDR_RESOLVED) {
      if (rdma_resolve_route(event.id, 5000) != 0) fail(i, std::string("rdma_resolve_route: ") + std::strerror(errno));
    } else if (type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      std::string why;
      if (!flood.createQp(event.id, 4096, why)) {
        fail(i, why);
        continue;
      }
      rdma_conn_param param{};
      param.responder_resources = param.initiator_depth = 1;
      param.retry_count = 7;
      param.rnr_retry_count = 7;
      if (!flood.connect(i, param, why)) fail(i, why);
    } else if (type == RDMA_CM_EVENT_ESTABLISHED && states[i] == State::Connecting) {
      states[i] = State::Established;  // and never a word
      ++established;
    } else if (type == RDMA_CM_EVENT_REJECTED && states[i] == State::Connecting) {
      states[i] = State::Rejected;
      ++rejected;
    } else if (type == RDMA_CM_EVENT_DISCONNECTED && states[i] == State::Established) {
      states[i] = State::Closed;  // the server gave up on it
      --established;
      ++closed;
      if (firstClosedAt < 0) firstClosedAt = elapsedMs(start);
      (void)rdma_disconnect(event.id);
    } else if (states[i] == State::Connecting) {
      fail(i, std::string(rdma_event_str(type)) + " (status " + std::to_string(event.status) + ")");
    }
    const uint64_t answered = established + closed + rejected;
    if (answered != reported && (answered % 100 == 0 || answered + failed == count)) {
      reported = answered;
      std::printf("established %llu of %llu (%llu rejected, %llu closed by the server) in %d ms\n",
                  static_cast<unsigned long long>(established + closed), static_cast<unsigned long long>(count),
                  static_cast<unsigned long long>(rejected), static_cast<unsigned long long>(closed), elapsedMs(start));
      std::fflush(stdout);
    }
    if (failed == count || closed + rejected + failed == count) break;  // nothing left to hold
  }
  outcome = "no-hello: " + std::to_string(established + closed) + " established, " + std::to_string(closed) +
            " closed by the server" + (firstClosedAt >= 0 ? " (the first after " + std::to_string(firstClosedAt) + " ms)" : "") +
            ", " + std::to_string(rejected) + " rejected" + (firstReason.empty() ? "" : " (the first: " + firstReason + ")") +
            ", " + std::to_string(failed) + " failed" + (failure.empty() ? "" : " (" + failure + ")") + ", after " +
            std::to_string(elapsedMs(start)) + " ms";
  return established + closed + rejected > 0;
}

// Waits up to `ms` for a region answer (grant or refusal) among the frames the server sends.
bool regionAnswer(Peer& peer, int ms, std::vector<uint8_t>& answer) {
  const auto start = Clock::now();
  while (elapsedMs(start) < ms) {
    if (!peer.receive(ms - elapsedMs(start), answer)) return false;
    if (answer.size() >= 16 && ((answer[1] & 0x3f) == 2 || (answer[1] & 0x3f) == 3)) return true;
  }
  return false;
}

std::vector<uint8_t> regionRequest(uint64_t bytes, uint32_t access) {
  std::vector<uint8_t> request(12);
  putBig(&request[0], bytes, 8);
  putBig(&request[8], access, 4);
  return frame(1, 0, request, 1);
}

// "granted: address A length L rkey R access X" or "refused: REASON"; the grant's fields in the out
// parameters.
std::string describeAnswer(const std::vector<uint8_t>& answer, uint64_t& address, uint32_t& rkey) {
  if ((answer[1] & 0x3f) == 3 && answer.size() >= 20)
    return "refused: " + std::string(std::strerror(static_cast<int>(getBig(&answer[16], 4))));
  if (answer.size() < 40) return "a malformed answer";
  address = getBig(&answer[16], 8);
  rkey = static_cast<uint32_t>(getBig(&answer[32], 4));
  return "granted: " + std::to_string(getBig(&answer[24], 8)) + " bytes, access " +
         std::to_string(getBig(&answer[36], 4));
}

// blast's request (private data): "EVBL" | u8 version 1 | u8 mode | u16 flags | u32 buffers |
// u32 size | u64 count. Mode 1: RDMA writes into regions the server lends.
std::vector<uint8_t> blastWriteMode() {
  std::vector<uint8_t> d(24);
  std::memcpy(d.data(), "EVBL", 4);
  d[4] = 1;
  d[5] = 1;
  putBig(&d[8], 8, 4);
  putBig(&d[12], 4096, 4);
  putBig(&d[16], 10, 8);
  return d;
}

bool attack(const std::string& name, const char* address, const char* port, int waitMs, std::string& outcome) {
  Peer peer;
  const auto connect = [&](Peer& p, const std::vector<uint8_t>& data) {
    const bool up = p.connect(address, port, data, 8);
    outcome = p.outcome;
    return up;
  };
  if (name == "never-reads") {
    if (!connect(peer, {})) return false;
    peer.send(hello(7));
    std::string commands;
    for (int i = 0; i < 10000; ++i) commands += "GET a\n";
    const std::vector<uint8_t> message = frame(0, 0, std::vector<uint8_t>(commands.begin(), commands.end()));
    // With the hello, as many messages as the server keeps receives posted (16): none waits for one.
    for (int i = 0; i < 15; ++i) peer.send(message);
    peer.watch(waitMs);  // no receive posted again, no credit returned
    outcome = "never-reads: " + peer.outcome;
    return true;
  }
  if (name == "region-request") {
    if (!connect(peer, {})) return false;
    peer.send(hello(7));
    peer.send(regionRequest(16 << 10, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE), 600 * 1024);
    std::vector<uint8_t> answer;
    if (!regionAnswer(peer, waitMs, answer)) {
      outcome = "region-request: no answer within " + std::to_string(waitMs) + " ms";
      return true;
    }
    uint64_t at = 0;
    uint32_t rkey = 0;
    outcome = "region-request: " + describeAnswer(answer, at, rkey);
    return true;
  }
  if (name == "borrowed-rkey") {
    if (!connect(peer, blastWriteMode())) return false;
    peer.send(hello(7));
    peer.send(regionRequest(8 * 4096, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE), 600 * 1024);  // its 8 buffers
    std::vector<uint8_t> answer;
    uint64_t at = 0;
    uint32_t rkey = 0;
    if (!regionAnswer(peer, waitMs, answer) || describeAnswer(answer, at, rkey).rfind("granted", 0) != 0) {
      outcome = "could not attack: the borrower got no region";
      return false;
    }
    constexpr size_t kMine = 700 * 1024, kBack = 704 * 1024, kTheirs = 708 * 1024;
    std::memset(peer.bytes(kMine), 0xaa, 4096);
    const int own = peer.oneSided(false, at, rkey, kMine, 4096, waitMs);
    Peer other;
    if (!connect(other, blastWriteMode())) return false;
    other.send(hello(7));
    std::memset(other.bytes(kTheirs), 0x55, 4096);
    const int stolen = other.oneSided(false, at, rkey, kTheirs, 4096, waitMs);
    std::memset(peer.bytes(kBack), 0, 4096);
    const int back = peer.oneSided(true, at, rkey, kBack, 4096, waitMs);
    bool unchanged = back == IBV_WC_SUCCESS;
    for (size_t i = 0; unchanged && i < 4096; ++i) unchanged = peer.bytes(kBack)[i] == 0xaa;
    const auto status = [](int s) { return s < 0 ? std::string("no completion") : ibv_wc_status_str(static_cast<ibv_wc_status>(s)); };
    outcome = "borrowed-rkey: the borrower's write: " + status(own) + "; the other peer's write with its rkey: " +
              status(stolen) + "; the borrower's read back: " + status(back) + ", the region " +
              (unchanged ? "unchanged" : "overwritten or unreadable");
    return true;
  }
  outcome = "unknown attack '" + name + "'";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  const char* port = nullptr;
  int waitMs = 10000;
  long long count = 1000;
  int opt;
  while ((opt = getopt(argc, argv, "a:p:w:n:h")) != -1) {
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': port = optarg; break;
      case 'w': waitMs = std::atoi(optarg); break;
      case 'n': count = std::atoll(optarg); break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
  }
  if (address == nullptr || port == nullptr || optind + 1 != argc || waitMs <= 0 || count <= 0 || count > 100000) {
    usage(stderr, argv[0]);
    return 2;
  }
  const std::string name = argv[optind];
  if (!evrdma::hostile::knownAttack(kAttacks, name)) {
    std::fprintf(stderr, "hostile-stream-peer: unknown attack '%s' (see -h)\n", name.c_str());
    return 2;
  }
  std::string outcome;
  const bool made = name == "no-hello" ? noHello(address, port, static_cast<uint64_t>(count), waitMs, outcome)
                                       : attack(name, address, port, waitMs, outcome);
  std::printf("%s\n", outcome.c_str());
  return made ? 0 : 1;
}
