// Send/recv round trips between RC clients and a server over librdmacm, in one process and one
// thread, ping-sr-4 style: the CM event channel and every completion channel are O_NONBLOCK and
// waited on with one poll(). Clients announce {count, size} in the connect private data (ping-sr-1);
// the server echoes every message back; clients verify every byte of every echo.
// This is the test bed's proof that real RDMA traffic flows; the library's own connection objects
// replace this hand-written loop later.
#include <endian.h>
#include <poll.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Verbs.h"
#include "rdma/TestBed.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kRecvWrId = 1;
constexpr uint64_t kSendWrId = 2;

struct ConnectInfo {  // the ping-sr-1 private data, network byte order on the wire
  uint64_t count;
  uint64_t dataSize;
};
static_assert(sizeof(ConnectInfo) == 16);

uint8_t patternByte(int client, uint64_t message, size_t offset) {
  return static_cast<uint8_t>(client * 31 + message * 131 + offset * 7);
}

std::string errnoText(int negativeErrno) { return std::strerror(-negativeErrno); }

// One side of one RC connection: the id and every verbs object hanging off it. Members are destroyed
// in reverse order: QP, CQ (acks flushed), channel, MRs, PD, id.
struct Endpoint {
  bool isClient = false;
  int clientIndex = 0;
  uint64_t count = 0;      // round trips to make
  size_t messageSize = 0;  // bytes per message

  evrdma::CmId id;
  evrdma::ProtectionDomain pd;
  std::vector<uint8_t> recvBuffer, sendBuffer;
  evrdma::MemoryRegionHandle recvMr, sendMr;
  evrdma::CompletionChannel channel;
  evrdma::CompletionQueue cq;
  evrdma::CmQueuePair qp;

  uint64_t done = 0;          // client: echoes verified; server: messages echoed
  bool sendInFlight = false;  // the send buffer may be reused only after its completion
  bool sendWanted = false;    // a message (client) or an echo (server) waits for the send buffer
  size_t echoLength = 0;
  bool established = false, disconnecting = false, closed = false;
  bool expectRefusal = false;  // a client aimed at a port nobody listens on
  rdma_cm_event_type endEvent = RDMA_CM_EVENT_DISCONNECTED;
  bool refusedInConnectCall = false;
  std::string failure;
  Clock::time_point connectStart, establishedAt, finishedAt;
  uint64_t emptyPolls = 0, completionEvents = 0, completions = 0;
};

class RoundTripRun {
 public:
  explicit RoundTripRun(const evrdma::test::TestBed& bed) : bed_(bed) {}

  // Listens on bed.ip (an ephemeral port), connects `clients` clients, each making `count` round
  // trips of `size` bytes; returns when all are done or `limit` passed. Failures go to failures().
  void run(int clients, uint64_t count, size_t size, std::chrono::seconds limit) {
    if (!setUpListener()) return;
    for (int i = 0; i < clients; ++i) startClient(i, count, size, port_);
    loopUntilClientsClosed(limit);
  }

  // One client, with a QP (iWARP refuses to connect without one), against `port` where nobody
  // listens. Returns the client, whose endEvent tells how its attempt ended.
  const Endpoint* connectToClosedPort(uint16_t port, std::chrono::seconds limit) {
    if (!setUpChannel()) return nullptr;
    startClient(0, 1, 64, port);
    clients_.back()->expectRefusal = true;
    loopUntilClientsClosed(limit);
    return clients_.back().get();
  }

  void loopUntilClientsClosed(std::chrono::seconds limit) {
    auto deadline = Clock::now() + limit;
    while (!allClientsClosed() && failures_.empty()) {
      if (Clock::now() > deadline) {
        failures_.push_back("time limit hit: " + describeClients());
        break;
      }
      waitAndDispatch(200);
    }
  }

  const std::vector<std::string>& failures() const { return failures_; }
  const std::vector<std::unique_ptr<Endpoint>>& clients() const { return clients_; }
  uint64_t serverEchoes() const { return serverEchoes_; }
  size_t serverConnectionsOpen() const { return servers_.size(); }

  // Lets the server side see its DISCONNECTED events and tear down (bounded).
  void drainServer(std::chrono::seconds limit) {
    auto deadline = Clock::now() + limit;
    while (!servers_.empty() && Clock::now() < deadline) waitAndDispatch(100);
  }

 private:
  bool fail(const std::string& what) {
    failures_.push_back(what);
    return false;
  }

  bool setUpChannel() {
    channel_.reset(rdma_create_event_channel());
    if (!channel_) return fail("rdma_create_event_channel: " + errnoText(-errno));
    if (int rc = evrdma::setNonBlocking(channel_->fd); rc != 0) return fail("O_NONBLOCK: " + errnoText(rc));
    return true;
  }

  bool setUpListener() {
    if (!setUpChannel()) return false;
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(channel_.get(), &raw, nullptr, RDMA_PS_TCP) != 0) return fail("rdma_create_id: " + errnoText(-errno));
    listener_.reset(raw);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;  // ephemeral: tests never collide on a port
    if (inet_pton(AF_INET, bed_.ip.c_str(), &addr.sin_addr) != 1) return fail("bad test-bed address " + bed_.ip);
    if (rdma_bind_addr(listener_.get(), reinterpret_cast<sockaddr*>(&addr)) != 0)
      return fail("rdma_bind_addr " + bed_.ip + ": " + errnoText(-errno));
    if (rdma_listen(listener_.get(), 64) != 0) return fail("rdma_listen: " + errnoText(-errno));
    port_ = ntohs(rdma_get_src_port(listener_.get()));
    return true;
  }

  void startClient(int index, uint64_t count, size_t size, uint16_t port) {
    auto client = std::make_unique<Endpoint>();
    client->isClient = true;
    client->clientIndex = index;
    client->count = count;
    client->messageSize = size;
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(channel_.get(), &raw, client.get(), RDMA_PS_TCP) != 0) {
      fail("client rdma_create_id: " + errnoText(-errno));
      return;
    }
    client->id.reset(raw);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    inet_pton(AF_INET, bed_.ip.c_str(), &dst.sin_addr);
    client->connectStart = Clock::now();
    if (rdma_resolve_addr(raw, nullptr, reinterpret_cast<sockaddr*>(&dst), 5000) != 0)
      fail("rdma_resolve_addr: " + errnoText(-errno));
    clients_.push_back(std::move(client));
  }

  bool allClientsClosed() const {
    for (const auto& c : clients_)
      if (!c->closed) return false;
    return true;
  }

  std::string describeClients() const {
    std::string s;
    for (const auto& c : clients_)
      s += "[client " + std::to_string(c->clientIndex) + ": " + std::to_string(c->done) + "/" +
           std::to_string(c->count) + (c->established ? " established" : "") + (c->closed ? " closed" : "") + "] ";
    return s;
  }

  // ---- the loop: one poll() over the CM channel and every completion channel ----
  void waitAndDispatch(int timeoutMs) {
    std::vector<pollfd> fds{{channel_->fd, POLLIN, 0}};
    std::vector<Endpoint*> owners{nullptr};
    auto watch = [&](Endpoint* e) {
      if (e->channel) {
        fds.push_back({e->channel->fd, POLLIN, 0});
        owners.push_back(e);
      }
    };
    for (auto& c : clients_) watch(c.get());
    for (auto& [id, s] : servers_) watch(s.get());
    int ready = poll(fds.data(), fds.size(), timeoutMs);
    if (ready < 0) {
      if (errno != EINTR) fail("poll: " + errnoText(-errno));
      return;
    }
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & POLLIN) processCompletions(*owners[i]);
    if (fds[0].revents & POLLIN) processCmEvents();
    reapClosedServers();
  }

  void processCmEvents() {
    for (;;) {
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(channel_.get(), &event) != 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) fail("rdma_get_cm_event: " + errnoText(-errno));
        return;
      }
      // Copy what we need, ack, then dispatch: the handler may destroy the id, which waits for acks.
      rdma_cm_event_type type = event->event;
      rdma_cm_id* id = event->id;
      bool isRequest = event->listen_id != nullptr;
      int status = event->status;
      std::vector<uint8_t> privateData;
      if (event->param.conn.private_data != nullptr)
        privateData.assign(static_cast<const uint8_t*>(event->param.conn.private_data),
                           static_cast<const uint8_t*>(event->param.conn.private_data) + event->param.conn.private_data_len);
      rdma_ack_cm_event(event);
      if (isRequest) {
        onConnectRequest(id, privateData);
      } else if (auto* e = static_cast<Endpoint*>(id->context)) {
        onCmEvent(*e, type, status);
      } else {
        fail(std::string("CM event for an id without context: ") + rdma_event_str(type));
      }
    }
  }

  bool setUpVerbs(Endpoint& e, rdma_cm_id* id) {
    e.pd.reset(ibv_alloc_pd(id->verbs));
    if (!e.pd) return fail("ibv_alloc_pd: " + errnoText(-errno));
    e.recvBuffer.assign(e.messageSize, 0);
    e.sendBuffer.assign(e.messageSize, 0);
    e.recvMr.reset(ibv_reg_mr(e.pd.get(), e.recvBuffer.data(), e.messageSize, IBV_ACCESS_LOCAL_WRITE));
    e.sendMr.reset(ibv_reg_mr(e.pd.get(), e.sendBuffer.data(), e.messageSize, 0));
    if (!e.recvMr || !e.sendMr) return fail("ibv_reg_mr: " + errnoText(-errno));
    e.channel.reset(ibv_create_comp_channel(id->verbs));
    if (!e.channel) return fail("ibv_create_comp_channel: " + errnoText(-errno));
    if (int rc = evrdma::setNonBlocking(e.channel->fd); rc != 0) return fail("O_NONBLOCK: " + errnoText(rc));
    int error = 0;
    e.cq = evrdma::CompletionQueue::create(id->verbs, 8, e.channel.get(), &e, error);
    if (!e.cq) return fail("ibv_create_cq: " + errnoText(error));
    if (ibv_req_notify_cq(e.cq.get(), 0) != 0) return fail("ibv_req_notify_cq");
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = e.cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, e.pd.get(), &attr) != 0) return fail("rdma_create_qp: " + errnoText(-errno));
    e.qp.reset(id);
    return postRecv(e);
  }

  bool postRecv(Endpoint& e) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(e.recvBuffer.data()), static_cast<uint32_t>(e.messageSize), e.recvMr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvWrId;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(e.qp->qp, &wr, &bad); rc != 0) return fail("ibv_post_recv: " + errnoText(-rc));
    return true;
  }

  bool postSend(Endpoint& e, size_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(e.sendBuffer.data()), static_cast<uint32_t>(length), e.sendMr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendWrId;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(e.qp->qp, &wr, &bad); rc != 0) return fail("ibv_post_send: " + errnoText(-rc));
    e.sendInFlight = true;
    return true;
  }

  // ---- server side ----
  void onConnectRequest(rdma_cm_id* id, const std::vector<uint8_t>& privateData) {
    auto agent = std::make_unique<Endpoint>();
    agent->id.reset(id);  // ours now: destroying it rejects nothing, so reject explicitly first
    id->context = agent.get();
    ConnectInfo info{};
    if (privateData.size() < sizeof info) {
      rdma_reject(id, nullptr, 0);
      fail("connect request with " + std::to_string(privateData.size()) + " bytes of private data");
      return;
    }
    std::memcpy(&info, privateData.data(), sizeof info);
    agent->count = be64toh(info.count);
    agent->messageSize = be64toh(info.dataSize);
    if (agent->count == 0 || agent->messageSize == 0 || agent->messageSize > (64u << 20)) {
      rdma_reject(id, nullptr, 0);
      fail("connect request with a bad count or size");
      return;
    }
    if (!setUpVerbs(*agent, id)) return;
    rdma_conn_param param{};
    param.responder_resources = param.initiator_depth = 1;
    param.rnr_retry_count = 7;
    if (rdma_accept(id, &param) != 0) {
      fail("rdma_accept: " + errnoText(-errno));
      return;
    }
    servers_[id] = std::move(agent);
  }

  void reapClosedServers() {
    for (auto it = servers_.begin(); it != servers_.end();)
      it = it->second->closed ? servers_.erase(it) : std::next(it);
  }

  // ---- CM events of established or connecting ids ----
  void onCmEvent(Endpoint& e, rdma_cm_event_type type, int status) {
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(e.id.get(), 5000) != 0) fail("rdma_resolve_route: " + errnoText(-errno));
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (!setUpVerbs(e, e.id.get())) break;
        ConnectInfo info{htobe64(e.count), htobe64(e.messageSize)};
        rdma_conn_param param{};
        param.private_data = &info;
        param.private_data_len = sizeof info;
        param.responder_resources = param.initiator_depth = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        if (rdma_connect(e.id.get(), &param) != 0) {
          // iWARP (siw) connects over TCP and may learn of the refusal inside rdma_connect itself.
          if (e.expectRefusal && errno == ECONNREFUSED) {
            e.endEvent = RDMA_CM_EVENT_REJECTED;
            e.refusedInConnectCall = true;
            e.closed = true;
          } else {
            fail("rdma_connect: " + errnoText(-errno));
          }
        }
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        e.established = true;
        e.establishedAt = Clock::now();
        if (e.isClient) {
          e.sendWanted = true;
          pump(e);
        }
        break;
      case RDMA_CM_EVENT_DISCONNECTED:
        if (!e.disconnecting) rdma_disconnect(e.id.get());  // answer the peer's disconnect
        e.disconnecting = true;
        e.closed = true;
        e.finishedAt = Clock::now();
        if (e.isClient && e.done != e.count) fail("client disconnected after " + std::to_string(e.done) + " round trips");
        if (e.isClient) releaseVerbs(e);
        break;
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
      case RDMA_CM_EVENT_REJECTED:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_CONNECT_ERROR:
        if (e.expectRefusal) {
          e.endEvent = type;
          e.closed = true;
          break;
        }
        [[fallthrough]];
      default:
        fail(std::string(e.isClient ? "client" : "server") + " got " + rdma_event_str(type) + " (status " +
             std::to_string(status) + ")");
        e.closed = true;
    }
  }

  void releaseVerbs(Endpoint& e) {
    e.qp.reset();
    e.cq.reset();
    e.channel.reset();
  }

  // ---- completions ----
  void processCompletions(Endpoint& e) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(e.channel.get(), &cq, &context) == 0) {
      e.cq.noteEvent();
      ++e.completionEvents;
    }
    // Re-arm before polling: a completion landing between the last poll and the arm still wakes us.
    if (ibv_req_notify_cq(e.cq.get(), 0) != 0) {
      fail("ibv_req_notify_cq");
      return;
    }
    ibv_wc wcs[8];
    bool any = false;
    for (;;) {
      int n = ibv_poll_cq(e.cq.get(), 8, wcs);
      if (n < 0) {
        fail("ibv_poll_cq failed");
        return;
      }
      if (n == 0) break;
      any = true;
      for (int i = 0; i < n; ++i) onCompletion(e, wcs[i]);
      if (e.closed) return;
    }
    if (!any) ++e.emptyPolls;
  }

  void onCompletion(Endpoint& e, const ibv_wc& wc) {
    ++e.completions;
    if (wc.status != IBV_WC_SUCCESS) {
      // Flushes are how a QP hands back its posted work when the connection goes down. After the
      // last round trip that is the normal end (iWARP may flush before DISCONNECTED arrives);
      // before it, the connection broke.
      bool finished = e.disconnecting || e.done == e.count;
      if (!(finished && wc.status == IBV_WC_WR_FLUSH_ERR))
        fail(std::string(e.isClient ? "client" : "server") + " work completion after " + std::to_string(e.done) +
             " of " + std::to_string(e.count) + " round trips: " + ibv_wc_status_str(wc.status));
      return;
    }
    if (wc.wr_id == kSendWrId) {
      e.sendInFlight = false;
    } else if (e.isClient) {
      const uint8_t* data = e.recvBuffer.data();
      for (size_t j = 0; j < e.messageSize; ++j) {
        if (data[j] != patternByte(e.clientIndex, e.done, j)) {
          fail("client " + std::to_string(e.clientIndex) + ": echo " + std::to_string(e.done) + " differs at byte " +
               std::to_string(j));
          return;
        }
      }
      if (wc.byte_len != e.messageSize) fail("echo of " + std::to_string(wc.byte_len) + " bytes");
      if (++e.done < e.count) {
        e.sendWanted = true;
      } else {
        e.disconnecting = true;
        if (rdma_disconnect(e.id.get()) != 0) fail("rdma_disconnect: " + errnoText(-errno));
      }
    } else {
      e.echoLength = wc.byte_len;
      e.sendWanted = true;
    }
    pump(e);
  }

  // Sends what is wanted once the send buffer is free; the receive is re-posted first, so the peer's
  // next message always finds one.
  void pump(Endpoint& e) {
    if (!e.sendWanted || e.sendInFlight || e.disconnecting) return;
    e.sendWanted = false;
    size_t length = e.messageSize;
    if (e.isClient) {
      for (size_t j = 0; j < length; ++j) e.sendBuffer[j] = patternByte(e.clientIndex, e.done, j);
    } else {
      length = e.echoLength;
      std::memcpy(e.sendBuffer.data(), e.recvBuffer.data(), length);
      ++e.done;
      ++serverEchoes_;
    }
    if (postRecv(e)) postSend(e, length);
  }

  evrdma::test::TestBed bed_;
  // Declared before every id, so destroyed after them all: an id must go before its event channel.
  evrdma::CmEventChannel channel_;
  evrdma::CmId listener_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Endpoint>> clients_;
  std::map<rdma_cm_id*, std::unique_ptr<Endpoint>> servers_;
  uint64_t serverEchoes_ = 0;
  std::vector<std::string> failures_;
};

void report(const char* what, const RoundTripRun& run, size_t size) {
  uint64_t roundTrips = 0, emptyPolls = 0, events = 0;
  double busiest = 0;
  for (const auto& c : run.clients()) {
    roundTrips += c->done;
    emptyPolls += c->emptyPolls;
    events += c->completionEvents;
    double seconds = std::chrono::duration<double>(c->finishedAt - c->establishedAt).count();
    if (seconds > busiest) busiest = seconds;
  }
  double perRoundTripUs = roundTrips ? busiest * 1e6 * run.clients().size() / roundTrips : 0;
  std::printf("[ figures  ] %s: %zu client(s), %llu verified round trips of %zu B in %.3f s "
              "(%.1f us per round trip per client, %.0f round trips/s in all), %llu completion events, "
              "%llu empty polls\n",
              what, run.clients().size(), static_cast<unsigned long long>(roundTrips), size, busiest,
              perRoundTripUs, busiest > 0 ? roundTrips / busiest : 0.0, static_cast<unsigned long long>(events),
              static_cast<unsigned long long>(emptyPolls));
}

class SendRecvRoundTrip : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override { ASSERT_TRUE(evrdma::test::loadTestBed(bed_)); }
  evrdma::test::TestBed bed_;
};

TEST_P(SendRecvRoundTrip, OneClientGetsEveryMessageEchoedIntact) {
  const size_t size = GetParam();
  const uint64_t count = size >= (1u << 20) ? 4 : 20;
  RoundTripRun run(bed_);
  run.run(1, count, size, std::chrono::seconds(60));
  for (const auto& f : run.failures()) ADD_FAILURE() << f;
  ASSERT_EQ(run.clients().size(), 1u);
  EXPECT_EQ(run.clients()[0]->done, count);
  EXPECT_EQ(run.serverEchoes(), count);
  run.drainServer(std::chrono::seconds(10));
  EXPECT_EQ(run.serverConnectionsOpen(), 0u) << "the server side never saw its DISCONNECTED";
  report(("size " + std::to_string(size)).c_str(), run, size);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SendRecvRoundTrip, ::testing::Values(1, 64, 4096, 65536, 1 << 20),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           return std::to_string(param.param) + "B";
                         });

TEST(SendRecvRoundTripMany, SixteenClientsAgainstOneServerAllFinishVerified) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  constexpr int kClients = 16;
  constexpr uint64_t kCount = 50;
  RoundTripRun run(bed);
  run.run(kClients, kCount, 1024, std::chrono::seconds(120));
  for (const auto& f : run.failures()) ADD_FAILURE() << f;
  ASSERT_EQ(run.clients().size(), static_cast<size_t>(kClients));
  for (const auto& c : run.clients()) EXPECT_EQ(c->done, kCount) << "client " << c->clientIndex;
  EXPECT_EQ(run.serverEchoes(), kClients * kCount);
  run.drainServer(std::chrono::seconds(10));
  EXPECT_EQ(run.serverConnectionsOpen(), 0u);
  report("16 clients", run, 1024);
}

TEST(SendRecvRoundTripErrors, ConnectingToAPortWithNoListenerIsRefusedNotHung) {
  evrdma::test::TestBed bed;
  ASSERT_TRUE(evrdma::test::loadTestBed(bed));
  RoundTripRun run(bed);
  const Endpoint* client = run.connectToClosedPort(1, std::chrono::seconds(60));  // nobody listens on port 1
  for (const auto& f : run.failures()) ADD_FAILURE() << f;
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->closed);
  rdma_cm_event_type end = client->endEvent;
  EXPECT_TRUE(end == RDMA_CM_EVENT_REJECTED || end == RDMA_CM_EVENT_UNREACHABLE || end == RDMA_CM_EVENT_CONNECT_ERROR)
      << "got " << rdma_event_str(end);
  std::printf("[ figures  ] connect to a closed port ended with %s\n",
              client->refusedInConnectCall ? "ECONNREFUSED from rdma_connect" : rdma_event_str(end));
}

}  // namespace
