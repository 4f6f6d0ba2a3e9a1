// raw-pingpong: the floor for pingpong's adaptive polling, a ping-pong written straight on
// librdmacm and libibverbs with no library and no event loop between the poll and the post.
//
// It sets a connection up as evrdma does for pingpong (one 512-entry CQ for sends and receives,
// send and receive depth 2, every send signaled, messages of up to 64 B inline, polls of 16) and
// busy-polls, as ib_send_lat does; it times each round trip as pingpong-client does (from one
// post to the next, the clock read just after the post). make bench runs it beside pingpong -P
// and ib_send_lat: pingpong / raw-pingpong is the part of the polling gap that is evrdma's own.
//
// A benchmark peer, not an example: it blocks in rdma_get_cm_event while connecting and spins a
// core while connected. The server serves one client and exits.
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <vector>

#include "CommandLine.h"

namespace {

constexpr int kCqEntries = 512;
constexpr uint32_t kDepth = 2;     // sends and receives, as pingpong asks for
constexpr uint32_t kInline = 64;
constexpr int kPollBatch = 16;
constexpr uint64_t kSendTag = 1ull << 63;  // wr_id of a send; a receive's is its buffer's index

using Clock = std::chrono::steady_clock;

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s -a ADDRESS [-p PORT] [-S] [-c COUNT] [-s SIZE]\n"
               "A ping-pong straight on verbs, busy-polling: the floor that make bench measures\n"
               "pingpong -P against. Set up as evrdma sets up pingpong's connection.\n"
               "  -a ADDRESS  the server's IPv4 address on the RDMA device (the server binds it)\n"
               "  -p PORT     port (default 7475)\n"
               "  -S          be the server: echo every message of one client, then exit\n"
               "  -c COUNT    round trips (client, default 5000)\n"
               "  -s SIZE     message size in bytes, 1 to 1048576 (client, default 64)\n"
               "  -h, --help  this text\n"
               "The client prints the average and median round trip, as pingpong-client -x does.\n",
               prog);
}

struct Fail {
  std::string what;
};

[[noreturn]] void fail(const std::string& what) { throw Fail{what}; }
// A failed call: its name, what the error number says, and a hint if any helps.
[[noreturn]] void failed(const char* call, int err, const char* hint = "") {
  fail(std::string(call) + ": " + std::strerror(err) + hint);
}

rdma_cm_event* expect(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) failed("rdma_get_cm_event", errno);
  if (event->event != type) {
    std::string what = std::string("expected ") + rdma_event_str(type) + ", got " + rdma_event_str(event->event);
    if (event->status != 0) what += std::string(" (") + std::strerror(-event->status) + ")";
    rdma_ack_cm_event(event);
    fail(what);
  }
  return event;
}

// One connection's verbs objects, released in reverse order.
struct Endpoint {
  Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* memory = nullptr;  // kDepth receive buffers, then kDepth send buffers, page-aligned
  size_t size = 0;
  uint32_t inlineLimit = kInline;
  bool hasQp = false;

  uint8_t* buffer(size_t index) { return memory + index * size; }

  void setUp(rdma_cm_id* cmId, size_t messageSize) {
    id = cmId;
    size = messageSize;
    if ((pd = ibv_alloc_pd(id->verbs)) == nullptr) failed("ibv_alloc_pd", errno);
    if ((cq = ibv_create_cq(id->verbs, kCqEntries, nullptr, nullptr, 0)) == nullptr)
      failed("ibv_create_cq", errno);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = kDepth;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = kInline;
    attr.sq_sig_all = 0;
    if (rdma_create_qp(id, pd, &attr) != 0) {
      attr.cap.max_inline_data = inlineLimit = 0;  // a device without inline data, as evrdma does
      if (rdma_create_qp(id, pd, &attr) != 0) failed("rdma_create_qp", errno);
    }
    hasQp = true;
    // Page-aligned, as perftest's and evrdma's buffers are: a message then spans no more pages
    // than it must, and rxe copies it page by page.
    const size_t bytes = (2 * kDepth * size + 4095) / 4096 * 4096;
    if ((memory = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes))) == nullptr) fail("out of memory");
    std::memset(memory, 0, bytes);
    mr = ibv_reg_mr(pd, memory, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) failed("ibv_reg_mr", errno, " (ulimit -l?)");
    for (uint32_t i = 0; i < kDepth; ++i) postRecv(i);
  }

  void postRecv(uint64_t index) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer(index)), static_cast<uint32_t>(size), mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = index;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (int rc = ibv_post_recv(id->qp, &wr, &bad); rc != 0) failed("ibv_post_recv", rc);
  }

  void postSend(const uint8_t* data, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(data), length, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = kSendTag;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (length <= inlineLimit ? IBV_SEND_INLINE : 0);
    if (int rc = ibv_post_send(id->qp, &wr, &bad); rc != 0) failed("ibv_post_send", rc);
  }

  ~Endpoint() {
    if (hasQp) rdma_destroy_qp(id);
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    std::free(memory);
  }
};

void check(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS)
    fail(std::string(wc.wr_id == kSendTag ? "send" : "receive") + " failed: " + ibv_wc_status_str(wc.status));
}

// The server echoes each message as pingpong-server does: copied out of its receive buffer (a
// message of up to kInline bytes by the post itself), that buffer re-posted at once. The echo's
// send buffers take turns, kDepth of them, as many as sends may be in flight.
void serve(rdma_event_channel* channel, Endpoint& ep) {
  uint32_t inFlight = 0, next = 0;
  ibv_wc wcs[kPollBatch];
  unsigned idlePolls = 0;
  for (;;) {
    int n = ibv_poll_cq(ep.cq, kPollBatch, wcs);
    if (n < 0) fail("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status == IBV_WC_WR_FLUSH_ERR) return;  // the client is gone
      check(wc);
      if (wc.wr_id == kSendTag) {
        --inFlight;
        continue;
      }
      if (inFlight == kDepth) fail("the client sent more than one message at a time");
      const uint8_t* data = ep.buffer(wc.wr_id);
      if (wc.byte_len > ep.inlineLimit) {
        uint8_t* copy = ep.buffer(kDepth + next);
        std::memcpy(copy, data, wc.byte_len);
        data = copy;
        next = (next + 1) % kDepth;
      }
      ep.postSend(data, wc.byte_len);
      ++inFlight;
      ep.postRecv(wc.wr_id);
    }
    // Now and then, a look at the CM channel (non-blocking) for the client's disconnect.
    if (n == 0 && ++idlePolls % 4096 == 0) {
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(channel, &event) == 0) {
        const bool gone = event->event == RDMA_CM_EVENT_DISCONNECTED;
        rdma_ack_cm_event(event);
        if (gone) return;
      }
    }
  }
}

int runServer(const sockaddr* address) {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) failed("rdma_create_event_channel", errno);
  rdma_cm_id* listenId = nullptr;
  if (rdma_create_id(channel, &listenId, nullptr, RDMA_PS_TCP) != 0) failed("rdma_create_id", errno);
  if (rdma_bind_addr(listenId, const_cast<sockaddr*>(address)) != 0)
    failed("rdma_bind_addr", errno, errno == EADDRINUSE ? " (port in use)" : "");
  if (rdma_listen(listenId, 1) != 0) failed("rdma_listen", errno);
  std::printf("raw-pingpong: listening on port %u\n", ntohs(rdma_get_src_port(listenId)));
  std::fflush(stdout);
  rdma_cm_event* request = expect(channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* id = request->id;
  rdma_ack_cm_event(request);
  {
    Endpoint ep;
    // The server's buffers hold the largest message a client may send.
    ep.setUp(id, 1 << 20);
    rdma_conn_param param{};
    param.responder_resources = param.initiator_depth = 1;
    param.rnr_retry_count = 7;
    if (rdma_accept(id, &param) != 0) failed("rdma_accept", errno);
    rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ESTABLISHED));
    fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
    serve(channel, ep);
    rdma_disconnect(id);
  }
  rdma_destroy_id(id);
  rdma_destroy_id(listenId);
  rdma_destroy_event_channel(channel);
  return 0;
}

int runClient(const sockaddr* address, uint64_t count, size_t size) {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) failed("rdma_create_event_channel", errno);
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) failed("rdma_create_id", errno);
  if (rdma_resolve_addr(id, nullptr, const_cast<sockaddr*>(address), 2000) != 0)
    failed("rdma_resolve_addr", errno);
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(id, 2000) != 0) failed("rdma_resolve_route", errno);
  rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
  std::vector<double> trips;
  trips.reserve(count);
  Clock::time_point started, ended;
  {
    Endpoint ep;
    ep.setUp(id, size);
    rdma_conn_param param{};
    param.responder_resources = param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(id, &param) != 0) failed("rdma_connect", errno);
    rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ESTABLISHED));

    ibv_wc wcs[kPollBatch];
    started = Clock::now();
    Clock::time_point previous = started;
    uint32_t inFlight = 0;
    // Each echo is checked for its number; a message shorter than the number carries its first
    // bytes. The whole number goes with a copy of constant size, inlined: a copy of variable
    // length is a call to memcpy, ~70 instructions per round trip more than before (callgrind),
    // which would make this floor slower than it was.
    const bool whole = size >= sizeof(uint64_t);
    for (uint64_t sent = 1; sent <= count; ++sent) {
      uint8_t* out = ep.buffer(kDepth + sent % kDepth);  // not read by a send still in flight
      if (whole)
        std::memcpy(out, &sent, sizeof sent);
      else
        std::memcpy(out, &sent, size);
      ep.postSend(out, static_cast<uint32_t>(size));
      ++inFlight;
      // As pingpong-client: the clock is read after the post, while the peer works on the echo.
      const Clock::time_point now = Clock::now();
      if (sent > 1) trips.push_back(std::chrono::duration<double, std::micro>(now - previous).count());
      previous = now;
      bool echoed = false;
      while (!echoed || inFlight == kDepth) {
        int n = ibv_poll_cq(ep.cq, kPollBatch, wcs);
        if (n < 0) fail("ibv_poll_cq failed");
        for (int i = 0; i < n; ++i) {
          check(wcs[i]);
          if (wcs[i].wr_id == kSendTag) {
            --inFlight;
            continue;
          }
          uint64_t number = 0, expected = sent;
          if (whole) {
            std::memcpy(&number, ep.buffer(wcs[i].wr_id), sizeof number);
          } else {
            expected = 0;
            std::memcpy(&number, ep.buffer(wcs[i].wr_id), size);
            std::memcpy(&expected, &sent, size);
          }
          if (wcs[i].byte_len != size || number != expected)
            fail("echo " + std::to_string(sent) + " came back wrong (" + std::to_string(wcs[i].byte_len) + " bytes)");
          ep.postRecv(wcs[i].wr_id);
          echoed = true;
        }
      }
    }
    ended = Clock::now();
    trips.push_back(std::chrono::duration<double, std::micro>(ended - previous).count());
    rdma_disconnect(id);
  }
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  const double total = std::chrono::duration<double, std::micro>(ended - started).count();
  std::sort(trips.begin(), trips.end());
  std::printf("raw-pingpong: %llu round trips of %zu bytes in %.3f s: %.2f us per round trip\n",
              static_cast<unsigned long long>(count), size, total / 1e6, total / static_cast<double>(count));
  std::printf("round trip: median %.2f us, min %.2f us, max %.2f us\n", trips[trips.size() / 2], trips.front(),
              trips.back());
  if (trips.size() > 2) {  // as pingpong-client -x prints it: ib_send_lat's t_avg drops its 2 longest
    double sum = 0;
    for (size_t i = 0; i + 2 < trips.size(); ++i) sum += trips[i];
    std::printf("round trip as ib_send_lat averages it (its 2 longest left out): %.2f us\n",
                sum / static_cast<double>(trips.size() - 2));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* prog = argv[0];
  const char* host = nullptr;
  unsigned long long port = 7475, count = 5000, size = 64;
  bool server = false, good = true;
  int opt;
  while (good && (opt = getopt_long(argc, argv, "a:p:Sc:s:h", pingpong::kLongOptions, nullptr)) != -1) {
    switch (opt) {
      case 'a': host = optarg; break;
      case 'p': good = pingpong::optionsAreGood(prog, pingpong::parseNumber(optarg, 65535, port), opt, optarg); break;
      case 'S': server = true; break;
      case 'c':
        good = pingpong::optionsAreGood(prog, pingpong::parseNumber(optarg, 100000000, count) && count > 0, opt, optarg);
        break;
      case 's':
        good = pingpong::optionsAreGood(prog, pingpong::parseNumber(optarg, 1 << 20, size) && size >= 1, opt, optarg);
        break;
      case 'h': usage(stdout, prog); return 0;
      default: good = false;
    }
  }
  if (!good || !pingpong::noStrayArguments(prog, optind, argc, argv)) return 2;
  if (host == nullptr) {
    std::fprintf(stderr, "%s: -a ADDRESS is required (see -h)\n", prog);
    return 2;
  }
  addrinfo hints{}, *resolved = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host, service.c_str(), &hints, &resolved) != 0) {
    std::fprintf(stderr, "%s: '%s' is not a numeric IPv4 address\n", prog, host);
    return 2;
  }
  try {
    int rc = server ? runServer(resolved->ai_addr) : runClient(resolved->ai_addr, count, size);
    freeaddrinfo(resolved);
    return rc;
  } catch (const Fail& f) {
    freeaddrinfo(resolved);
    std::fprintf(stderr, "%s: %s\n", prog, f.what.c_str());
    return 1;
  }
}
