// hostile-client: attacks the demo servers the way a hostile peer would, with raw librdmacm and
// verbs (none of evrdma's own checks stand in the way), and reports how the server answered.
// tests/hostile/hostile_servers_test.sh replays every attack against pingpong-server and
// blast-server while well-behaved clients run alongside.
//   usage: hostile-client -a ADDR -p PORT ATTACK   (hostile-client -h lists the attacks)
// Prints one line: "rejected: REASON", "closed by the server after N ms", or "still connected
// after N ms" (the attack ends when the server has answered, or after -w MS). Exit status 0 when
// the attack could be made (whatever the server did), 1 when it could not, 2 on bad usage.
#include <getopt.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
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
    {"pingsr-short-data", "ping-sr with 3 bytes of private data (it needs 16)"},
    {"pingsr-zero-size", "ping-sr asking for 10 messages of 0 bytes"},
    {"pingsr-echo-hog", "ping-sr {1000, 64}: one receive posted, 40 messages at once, none taken back"},
    {"pingsr-oversized", "ping-sr {10, 64}: a message of 4096 bytes"},
    {"pingsr-vanish", "ping-sr {10, 64}: one message, then the process exits without disconnecting"},
    {"blast-bad-request", "a blast request with an unknown mode"},
    {"blast-garbage-frame", "blast send mode: a first message that is no evrdma frame"},
    {"blast-data-before-hello", "blast send mode: a data frame before the hello"},
    {"blast-region-flood", "blast write mode: a hello, then 100 region requests at once"},
    {"blast-credit-flood", "blast send mode: a hello, then 100 messages ignoring credits"},
    {"bad-rkey-write", "ping-sr {10, 64}: an RDMA write with an rkey the server never gave, then silence"},
    {"keepalive-flood", "framed: a hello granting no credits, then keepalive probes until -w ends, no credit ever"},
    {"region-ask-flood", "framed: a hello granting no credits, then 2000 region requests, no credit ever"},
    {"half-open", "ping-sr {10, -s}: -n connect requests, their answers never read (RoCE: no QP, no RTU ever)"},
};

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDR -p PORT [-w MS] [-i USEC] [-n COUNT] [-s BYTES] ATTACK\n"
               "Attacks a demo server with raw librdmacm/verbs and prints how it answered.\n"
               "  -a ADDR   server address (numeric)\n"
               "  -p PORT   server port\n"
               "  -w MS     how long to wait for the server's answer (default 10000)\n"
               "  -i USEC   the floods: pause USEC between sends (default 0)\n"
               "  -n COUNT  half-open: how many requests (default 1000)\n"
               "  -s BYTES  half-open: the message size asked for (default 64)\n"
               "  -h        this help\n"
               "Attacks:\n",
               prog);
  evrdma::hostile::listAttacks(out, kAttacks, 24);
}

std::vector<uint8_t> pingSr(uint64_t count, uint64_t size) {
  std::vector<uint8_t> d(16);
  putBig(&d[0], count, 8);
  putBig(&d[8], size, 8);
  return d;
}

// blast: "EVBL" | u8 version 1 | u8 mode | u16 flags | u32 buffers | u32 size | u64 count.
std::vector<uint8_t> blastRequest(uint8_t mode, uint32_t buffers, uint32_t size, uint64_t count) {
  std::vector<uint8_t> d(24);
  std::memcpy(d.data(), "EVBL", 4);
  d[4] = 1;
  d[5] = mode;
  putBig(&d[8], buffers, 4);
  putBig(&d[12], size, 4);
  putBig(&d[16], count, 8);
  return d;
}

// `count` connect requests on one event channel, none ever completed. InfiniBand and RoCE: from
// ids without a QP (the request names a made-up QP number): librdmacm sends the RTU only for an id
// with a QP, or when the application accepts the answer itself, which this never does, so the
// server holds an agent for each until its acceptTimeout. iWARP needs a QP to connect, and its
// kernels complete the connection by themselves: there each id gets a QP (siw holds about 70 per
// process) and the connections are established, never used. Prints "answered K of N (A accepted,
// R rejected) in T ms" as answers come, then holds everything until `waitMs` has passed.
bool halfOpen(const char* address, const char* port, uint64_t count, uint64_t size, int waitMs, std::string& outcome) {
  CmFlood flood(count);
  if (!flood.open(address, port, outcome)) return false;
  // At most kInFlight requests unanswered at once: past the server's backlog (1024 by default) its
  // kernel would reject them before the server sees them.
  constexpr uint64_t kInFlight = 256;
  enum class Answer : uint8_t { None, Accepted, Rejected, Failed };
  std::vector<Answer> answers(count, Answer::None);
  const std::vector<uint8_t> request = pingSr(10, size);
  uint64_t started = 0, accepted = 0, rejected = 0, failed = 0, endedLater = 0;
  std::string failure, firstReason;
  const auto fail = [&](uint64_t i, std::string why) {
    if (answers[i] != Answer::None) return;
    answers[i] = Answer::Failed;
    ++failed;
    failure = std::move(why);
  };
  const auto startNext = [&] {
    const uint64_t i = started++;
    std::string why;
    if (!flood.start(i, why)) fail(i, why);
  };
  while (started < count && started < kInFlight) startNext();
  const auto start = Clock::now();
  const auto elapsed = [&] {
    return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  };
  uint64_t reported = 0;
  while (elapsed() < waitMs) {
    while (started < count && started - (accepted + rejected + failed) < kInFlight) startNext();
    CmFlood::Event event;
    if (!flood.next(50, event)) continue;
    const uint64_t i = event.index;
    const rdma_cm_event_type type = event.type;
    if (type == RDMA_CM_EVENT_REJECTED && firstReason.empty()) firstReason = event.rejectReason;
    if (type == RDMA_CM_EVENT_ADDR_RESOLVED) {
      if (rdma_resolve_route(event.id, 5000) != 0) fail(i, std::string("rdma_resolve_route: ") + std::strerror(errno));
    } else if (type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      rdma_conn_param param{};
      param.private_data = request.data();
      param.private_data_len = static_cast<uint8_t>(request.size());
      param.responder_resources = param.initiator_depth = 1;
      param.retry_count = 7;
      param.rnr_retry_count = 7;
      // Far above the device's own QP numbers: over the loopback, a made-up number that a real QP
      // of the server also has makes its CM take the pair for a stale connection (REJ reason 10).
      param.qp_num = 0xf00000 + static_cast<uint32_t>(i);
      std::string why;
      if (event.id->verbs->device->transport_type == IBV_TRANSPORT_IWARP && !flood.createQp(event.id, 16, why)) {
        fail(i, why);
        continue;
      }
      if (!flood.connect(i, param, why)) fail(i, why);
    } else if (answers[i] != Answer::None) {
      ++endedLater;  // e.g. the server's agent gave up waiting (acceptTimeout): a reject after the answer
    } else if (type == RDMA_CM_EVENT_CONNECT_RESPONSE || type == RDMA_CM_EVENT_ESTABLISHED) {
      answers[i] = Answer::Accepted;  // and never completed (iWARP: never used)
      ++accepted;
    } else if (type == RDMA_CM_EVENT_REJECTED) {
      answers[i] = Answer::Rejected;
      ++rejected;
    } else {
      fail(i, std::string(rdma_event_str(type)) + " (status " + std::to_string(event.status) + ")");
    }
    const uint64_t answered = accepted + rejected;
    if (answered != reported && (answered % 100 == 0 || answered + failed == count)) {
      reported = answered;
      std::printf("answered %llu of %llu (%llu accepted, %llu rejected) in %d ms\n",
                  static_cast<unsigned long long>(answered), static_cast<unsigned long long>(count),
                  static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(rejected), elapsed());
      std::fflush(stdout);
    }
    if (failed == count) break;
  }
  outcome = "half-open: " + std::to_string(accepted) + " accepted (never completed), " + std::to_string(rejected) +
            " rejected" + (firstReason.empty() ? "" : " (the first: " + firstReason + ")") + ", " + std::to_string(failed) + " failed" + (failure.empty() ? "" : " (" + failure + ")") + ", " +
            std::to_string(endedLater) + " ended by the server later, after " + std::to_string(elapsed()) + " ms";
  if (accepted + rejected == 0) outcome = "could not attack: " + outcome;
  return accepted + rejected > 0;
}

// What the attack `name` does; false if it could not be made (outcome says why).
bool attack(const std::string& name, const char* address, const char* port, int waitMs, int intervalUs,
            std::string& outcome) {
  Peer peer;
  auto connect = [&](const std::vector<uint8_t>& data, int receives) {
    const bool up = peer.connect(address, port, data, receives);
    outcome = peer.outcome;
    return up;
  };
  auto answer = [&] {
    peer.watch(waitMs);
    outcome = peer.outcome;
    return true;
  };
  const std::vector<uint8_t> hello = frame(7, 7, std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 0, 0});  // 64 KiB, 7 credits
  if (name == "pingsr-short-data") return connect({1, 2, 3}, 1) ? answer() : outcome.rfind("rejected", 0) == 0;
  if (name == "pingsr-zero-size") return connect(pingSr(10, 0), 1) ? answer() : outcome.rfind("rejected", 0) == 0;
  if (name == "blast-bad-request")
    return connect(blastRequest(9, 8, 64, 10), 1) ? answer() : outcome.rfind("rejected", 0) == 0;
  if (name == "pingsr-echo-hog") {
    if (!connect(pingSr(1000, 64), 1)) return false;
    for (int i = 0; i < 40; ++i) peer.send(std::vector<uint8_t>(64, static_cast<uint8_t>(i)));
    return answer();
  }
  if (name == "pingsr-oversized") {
    if (!connect(pingSr(10, 64), 2)) return false;
    peer.send(std::vector<uint8_t>(4096, 0xab));
    return answer();
  }
  if (name == "bad-rkey-write") {
    if (!connect(pingSr(10, 64), 2)) return false;
    if (!peer.writeWithBadRkey()) {
      outcome = "could not attack: ibv_post_send refused the write";
      return false;
    }
    return answer();
  }
  if (name == "pingsr-vanish") {
    if (!connect(pingSr(10, 64), 2)) return false;
    peer.send(std::vector<uint8_t>(64, 1));
    const bool sent = peer.sendCompleted(10000);  // gone once the message has left, not after a fixed time
    std::printf("vanished without disconnecting%s\n", sent ? "" : " (its message never completed)");
    std::fflush(stdout);
    _exit(0);  // the kernel tears down the QP and the CM id: no disconnect of ours
  }
  if (name == "blast-garbage-frame") {
    if (!connect(blastRequest(0, 8, 64, 10), 8)) return false;
    peer.send(std::vector<uint8_t>{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9});
    return answer();
  }
  if (name == "blast-data-before-hello") {
    if (!connect(blastRequest(0, 8, 64, 10), 8)) return false;
    peer.send(frame(0, 0, std::vector<uint8_t>(64, 0)));
    return answer();
  }
  if (name == "blast-region-flood") {
    if (!connect(blastRequest(1, 8, 64, 10), 8)) return false;
    peer.send(hello);
    std::vector<uint8_t> request(12);
    putBig(&request[0], 64, 8);
    putBig(&request[8], IBV_ACCESS_REMOTE_WRITE, 4);
    for (uint64_t id = 1; id <= 100; ++id) peer.send(frame(1, 0, request, id), 512 * 1024 + id * 64);
    return answer();
  }
  if (name == "blast-credit-flood") {
    if (!connect(blastRequest(0, 8, 64, 100), 8)) return false;
    peer.send(hello);
    for (int i = 0; i < 100; ++i) peer.send(frame(0, 0, std::vector<uint8_t>(64, 0)), 512 * 1024 + i * 128);
    return answer();
  }
  // An evrdma framed peer (embedded-server's echo service): our hello grants the server no credit
  // beyond the receive its own hello used, so whatever it must send has to wait; ours go out
  // regardless (the server re-posts its receives), and we never return one.
  const std::vector<uint8_t> stingyHello = frame(7, 0, std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 0, 0});
  if (name == "keepalive-flood") {
    if (!connect({}, 8)) return false;
    peer.send(stingyHello);
    peer.flood(frame(8, 0, {}), UINT64_MAX, waitMs, intervalUs);
    outcome = peer.outcome;
    return true;
  }
  if (name == "region-ask-flood") {
    if (!connect({}, 8)) return false;
    peer.send(stingyHello);
    std::vector<uint8_t> request(12);
    putBig(&request[0], 1 << 30, 8);  // more than any server lends: each is refused
    putBig(&request[8], IBV_ACCESS_REMOTE_WRITE, 4);
    peer.flood(frame(1, 0, request, 1), 2000, waitMs, intervalUs);
    if (peer.outcome.rfind("closed", 0) != 0) peer.watch(waitMs);
    outcome = peer.outcome;
    return true;
  }
  outcome = "unknown attack '" + name + "'";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  const char* port = nullptr;
  int waitMs = 10000, intervalUs = 0;
  long long count = 1000, size = 64;
  int opt;
  while ((opt = getopt(argc, argv, "a:p:w:i:n:s:h")) != -1) {
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': port = optarg; break;
      case 'w': waitMs = std::atoi(optarg); break;
      case 'i': intervalUs = std::atoi(optarg); break;
      case 'n': count = std::atoll(optarg); break;
      case 's': size = std::atoll(optarg); break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
  }
  if (address == nullptr || port == nullptr || optind + 1 != argc || waitMs <= 0 || intervalUs < 0 || count <= 0 ||
      count > 100000 || size <= 0) {
    usage(stderr, argv[0]);
    return 2;
  }
  const std::string name = argv[optind];
  if (!evrdma::hostile::knownAttack(kAttacks, name)) {
    std::fprintf(stderr, "hostile-client: unknown attack '%s' (see -h)\n", name.c_str());
    return 2;
  }
  std::string outcome;
  const bool made = name == "half-open" ? halfOpen(address, port, static_cast<uint64_t>(count),
                                                   static_cast<uint64_t>(size), waitMs, outcome)
                                        : attack(name, address, port, waitMs, intervalUs, outcome);
  std::printf("%s\n", outcome.c_str());
  return made ? 0 : 1;
}
