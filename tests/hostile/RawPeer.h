// RawPeer: a peer made of raw librdmacm and verbs for the hostile tests (none of evrdma's own
// checks stand in its way): evrdma's frame header built by hand, a server's reject reason read,
// and Peer, one connection that sends, floods, watches and misbehaves as an attack tells it.
#pragma once

#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace evrdma::hostile {

// New ids a raw connection tries when TCP holds the port of the last. On iWARP siw binds the
// connection's TCP socket to the port rdma_cm picked for the id without asking TCP, so a TCP socket
// on that port (another program's, in TIME_WAIT) fails rdma_connect with EADDRINUSE: the
// connection starts over on a new id, a new port, as evrdma's own clients do.
constexpr int kPortRetries = 16;

using Clock = std::chrono::steady_clock;

inline void putBig(uint8_t* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, value >>= 8) out[i] = static_cast<uint8_t>(value);
}

// An evrdma frame: u8 version 1 | u8 type | u16 credits | u32 payload length | u64 request id.
inline std::vector<uint8_t> frame(uint8_t type, uint16_t credits, const std::vector<uint8_t>& payload, uint64_t id = 0) {
  std::vector<uint8_t> f(16 + payload.size());
  f[0] = 1;
  f[1] = type;
  putBig(&f[2], credits, 2);
  putBig(&f[4], payload.size(), 4);
  putBig(&f[8], id, 8);
  if (!payload.empty()) std::memcpy(f.data() + 16, payload.data(), payload.size());
  return f;
}

// The reason an evrdma server put in a reject ("EVRJ" | u8 length | text), or `otherwise`.
inline std::string rejectReason(const rdma_cm_event& event, std::string otherwise) {
  const auto* data = static_cast<const uint8_t*>(event.param.conn.private_data);
  const size_t length = event.param.conn.private_data_len;
  if (data != nullptr && length >= 5 && std::memcmp(data, "EVRJ", 4) == 0 && 5u + data[4] <= length)
    return std::string(reinterpret_cast<const char*>(data) + 5, data[4]);
  return otherwise;
}

class Peer {
 public:
  ~Peer() {
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  }

  // Resolves, sets up a QP with `receives` posted, connects with `privateData`. True when
  // established; false with `outcome` saying what happened instead (rejected, failed).
  bool connect(const char* address, const char* port, const std::vector<uint8_t>& privateData, int receives) {
    addrinfo hints{}, *ai = nullptr;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(address, port, &hints, &ai) != 0) return failed("bad address");
    const std::unique_ptr<addrinfo, void (*)(addrinfo*)> freed(ai, freeaddrinfo);
    channel_ = rdma_create_event_channel();
    rdma_conn_param param{};
    param.private_data = privateData.empty() ? nullptr : privateData.data();
    param.private_data_len = static_cast<uint8_t>(privateData.size());
    param.responder_resources = param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    for (int attempt = 0;; ++attempt) {  // a new id after EADDRINUSE (kPortRetries)
      const bool resolved = channel_ != nullptr && rdma_create_id(channel_, &id_, nullptr, RDMA_PS_TCP) == 0 &&
                            rdma_resolve_addr(id_, nullptr, ai->ai_addr, 5000) == 0 &&
                            waitFor(RDMA_CM_EVENT_ADDR_RESOLVED, 10000) && rdma_resolve_route(id_, 5000) == 0 &&
                            waitFor(RDMA_CM_EVENT_ROUTE_RESOLVED, 10000);
      if (!resolved) return failed("cannot resolve the address or route");
      if (pd_ == nullptr) {
        pd_ = ibv_alloc_pd(id_->verbs);
        cq_ = pd_ != nullptr ? ibv_create_cq(id_->verbs, 512, nullptr, nullptr, 0) : nullptr;
        buffer_.assign(1 << 20, 0);
        mr_ = cq_ != nullptr ? ibv_reg_mr(pd_, buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;  // (RDMA reads land here)
      }
      ibv_qp_init_attr attr{};
      attr.send_cq = attr.recv_cq = cq_;
      attr.qp_type = IBV_QPT_RC;
      attr.cap.max_send_wr = 256;
      attr.cap.max_recv_wr = 64;
      attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
      if (mr_ == nullptr || rdma_create_qp(id_, pd_, &attr) != 0) return failed("cannot set up a QP");
      for (int i = 0; i < receives; ++i)
        if (!postRecv(static_cast<size_t>(i) * 65536, 65536, kFirstRecvWrId + static_cast<uint64_t>(i)))
          return failed("cannot post a receive");
      if (rdma_connect(id_, &param) == 0) break;
      if (errno != EADDRINUSE || attempt == kPortRetries) return failed("rdma_connect failed");
      rdma_destroy_qp(id_);
      rdma_destroy_id(id_);
      id_ = nullptr;
    }
    rdma_cm_event* event = nullptr;
    if (!nextEvent(10000, event)) return failed("no answer to the connect request within 10 s");
    const rdma_cm_event_type type = event->event;
    if (type == RDMA_CM_EVENT_REJECTED) {
      const std::string reason = rejectReason(*event, "(no reason)");
      rdma_ack_cm_event(event);
      outcome = "rejected: " + reason;
      return false;
    }
    rdma_ack_cm_event(event);
    if (type != RDMA_CM_EVENT_ESTABLISHED) return failed(std::string("connect: ") + rdma_event_str(type));
    return true;
  }

  bool send(const std::vector<uint8_t>& message, size_t offset = 512 * 1024) {
    std::memcpy(buffer_.data() + offset, message.data(), message.size());
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), static_cast<uint32_t>(message.size()), mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    return ibv_post_send(id_->qp, &wr, &bad) == 0;
  }

  // Waits up to `ms` for a send of ours to complete (the message left), other completions dropped.
  bool sendCompleted(int ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc[16];
    while (Clock::now() < until) {
      for (int n, i; (n = ibv_poll_cq(cq_, 16, wc)) > 0;)
        for (i = 0; i < n; ++i)
          if (wc[i].opcode == IBV_WC_SEND) return wc[i].status == IBV_WC_SUCCESS;
      usleep(1000);
    }
    return false;
  }

  // Waits up to `ms` for the server to disconnect, taking completions meanwhile (never reposting
  // receives). Sets `outcome`.
  void watch(int ms) {
    const auto start = Clock::now();
    for (;;) {
      ibv_wc wc[16];
      while (ibv_poll_cq(cq_, 16, wc) > 0) {
      }
      const int elapsed = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      rdma_cm_event* event = nullptr;
      if (nextEvent(std::min(50, std::max(0, ms - elapsed)), event)) {
        const rdma_cm_event_type type = event->event;
        rdma_ack_cm_event(event);
        if (type == RDMA_CM_EVENT_DISCONNECTED) {
          outcome = "closed by the server after " + std::to_string(elapsed) + " ms";
          return;
        }
      }
      if (elapsed >= ms) {
        outcome = "still connected after " + std::to_string(elapsed) + " ms";
        return;
      }
    }
  }

  // Sends `message` again and again, one at a time (a server whose loop falls behind by as many as
  // it keeps posted answers with a receiver-not-ready, which costs the sender the server's RNR
  // timer: up to 655 ms), never a receive reposted, until `count` went out, `ms` passed or the
  // server disconnected. Sets `outcome`, which names what was sent.
  // `intervalUs` paces the sends: on iWARP a send completes once TCP took it, not once the server
  // took it, and a server that falls behind by as many as it keeps posted loses the connection.
  void flood(const std::vector<uint8_t>& message, uint64_t count, int ms, int intervalUs) {
    const auto start = Clock::now();
    uint64_t sent = 0, completed = 0, failedSends = 0;
    std::memcpy(buffer_.data() + 512 * 1024, message.data(), message.size());
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + 512 * 1024), static_cast<uint32_t>(message.size()), mr_->lkey};
    auto elapsed = [&] {
      return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    };
    const auto said = [&] { return ", " + std::to_string(sent) + " sent, " + std::to_string(failedSends) + " failed"; };
    for (;;) {
      while (sent < count && sent == completed) {
        if (intervalUs > 0 && sent > 0) usleep(static_cast<useconds_t>(intervalUs));
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr_id = kFloodWrId;
        if (ibv_post_send(id_->qp, &wr, &bad) != 0) break;
        ++sent;
      }
      ibv_wc wc[16];
      for (int n; (n = ibv_poll_cq(cq_, 16, wc)) > 0;)
        for (int i = 0; i < n; ++i)
          if (wc[i].wr_id == kFloodWrId) {  // not a receive, nor an earlier send()
            ++completed;
            if (wc[i].status != IBV_WC_SUCCESS) ++failedSends;
          }
      rdma_cm_event* event = nullptr;
      if (nextEvent(0, event)) {
        const rdma_cm_event_type type = event->event;
        rdma_ack_cm_event(event);
        if (type == RDMA_CM_EVENT_DISCONNECTED) {
          outcome = "closed by the server after " + std::to_string(elapsed()) + " ms" + said();
          return;
        }
      }
      if ((sent >= count && completed >= sent) || elapsed() >= ms) {
        outcome = "still connected after " + std::to_string(elapsed()) + " ms" + said();
        return;
      }
    }
  }

  // An RDMA write of 64 bytes to an address and rkey the server never advertised (the device
  // refuses it: on RoCE both queue pairs go to the error state).
  bool writeWithBadRkey() {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data()), 64, mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = 0x10000;
    wr.wr.rdma.rkey = 0x5a5a5a;
    return ibv_post_send(id_->qp, &wr, &bad) == 0;
  }

  // Waits up to `ms` for the next message the server sends (its receive completed), copies it
  // into `out`; sends' completions meanwhile are dropped. The receive is not posted again. Messages
  // that one poll brought with it wait for the next call (two frames sent at once come in one).
  bool receive(int ms, std::vector<uint8_t>& out) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc[16];
    while (received_.empty() && Clock::now() < until) {
      for (int n, i; (n = ibv_poll_cq(cq_, 16, wc)) > 0;)
        for (i = 0; i < n; ++i)
          if (wc[i].opcode == IBV_WC_RECV && wc[i].status == IBV_WC_SUCCESS) received_.push_back(wc[i]);
      if (received_.empty()) usleep(1000);
    }
    if (received_.empty()) return false;
    const ibv_wc first = received_.front();
    received_.erase(received_.begin());
    // Receive k of connect() was posted at k * 65536; which one came is in its wr_id.
    const uint8_t* at = buffer_.data() + (first.wr_id - kFirstRecvWrId) * 65536;
    out.assign(at, at + first.byte_len);
    return true;
  }

  // An RDMA write (or read, `read`) of `length` bytes of our buffer at `offset` to the server's
  // `address` and `rkey`; waits up to `ms` for its completion and returns its status (or -1 when
  // it could not be posted or never completed).
  int oneSided(bool read, uint64_t address, uint32_t rkey, size_t offset, uint32_t length, int ms) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr_id = kOneSidedWrId;
    wr.wr.rdma.remote_addr = address;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(id_->qp, &wr, &bad) != 0) return -1;
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc[16];
    while (Clock::now() < until) {
      for (int n, i; (n = ibv_poll_cq(cq_, 16, wc)) > 0;)
        for (i = 0; i < n; ++i)
          if (wc[i].wr_id == kOneSidedWrId) return wc[i].status;
      usleep(1000);
    }
    return -1;
  }
  uint8_t* bytes(size_t offset) { return buffer_.data() + offset; }

  std::string outcome;

 private:
  static constexpr uint64_t kOneSidedWrId = 2;
  static constexpr uint64_t kFloodWrId = 1;  // send() uses 0
  static constexpr uint64_t kFirstRecvWrId = 1000;  // receive k: kFirstRecvWrId + k
  bool postRecv(size_t offset, uint32_t length, uint64_t id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(id_->qp, &wr, &bad) == 0;
  }
  bool failed(std::string why) {
    outcome = "could not attack: " + why;
    return false;
  }
  bool nextEvent(int ms, rdma_cm_event*& event) {
    pollfd p{channel_->fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    return rdma_get_cm_event(channel_, &event) == 0;
  }
  bool waitFor(rdma_cm_event_type wanted, int ms) {
    rdma_cm_event* event = nullptr;
    if (!nextEvent(ms, event)) return false;
    const bool ok = event->event == wanted;
    rdma_ack_cm_event(event);
    return ok;
  }

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buffer_;
  std::vector<ibv_wc> received_;  // receives polled and not yet taken by receive()
};

}  // namespace evrdma::hostile
