// CmFlood: many raw connections of one attack on one event channel (half-open requests, silent
// connections), each CM id numbered by its context, sharing one PD and CQ made on first use; and
// the attacks' command-line table.
#pragma once

#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "RawPeer.h"

namespace evrdma::hostile {

// An attack as the programs' usage lists it.
struct Attack {
  const char* name;
  const char* what;
};

template <size_t N>
bool knownAttack(const Attack (&attacks)[N], const std::string& name) {
  for (const Attack& a : attacks)
    if (name == a.name) return true;
  return false;
}

template <size_t N>
void listAttacks(FILE* out, const Attack (&attacks)[N], int width) {
  for (const Attack& a : attacks) std::fprintf(out, "  %-*s %s\n", width, a.name, a.what);
}

class CmFlood {
 public:
  explicit CmFlood(uint64_t count) : ids_(count, nullptr), portRetries_(count, 0) {}
  ~CmFlood() {
    for (rdma_cm_id* id : ids_) {
      if (id == nullptr) continue;
      if (id->qp != nullptr) rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
    if (ai_ != nullptr) freeaddrinfo(ai_);
  }
  CmFlood(const CmFlood&) = delete;
  CmFlood& operator=(const CmFlood&) = delete;

  // The numeric address and the event channel; false with `outcome` saying why.
  bool open(const char* address, const char* port, std::string& outcome) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(address, port, &hints, &ai_) != 0) {
      ai_ = nullptr;
      outcome = "could not attack: bad address";
      return false;
    }
    channel_ = rdma_create_event_channel();
    if (channel_ == nullptr) {
      outcome = "could not attack: no event channel";
      return false;
    }
    return true;
  }

  // Connection `i` resolves its address; false with `why`.
  bool start(uint64_t i, std::string& why) {
    if (rdma_create_id(channel_, &ids_[i], reinterpret_cast<void*>(i), RDMA_PS_TCP) == 0 &&
        rdma_resolve_addr(ids_[i], nullptr, ai_->ai_addr, 5000) == 0)
      return true;
    why = std::string("rdma_resolve_addr: ") + std::strerror(errno);
    return false;
  }

  // rdma_connect for connection `i`, whose id has its route (and on iWARP its QP); after EADDRINUSE
  // the connection starts over on a new id, at most kPortRetries times (RawPeer.h says why).
  // False with `why` if it failed otherwise.
  bool connect(uint64_t i, rdma_conn_param& param, std::string& why) {
    if (rdma_connect(ids_[i], &param) == 0) return true;
    const int err = errno;
    if (err == EADDRINUSE && portRetries_[i] < kPortRetries) {
      ++portRetries_[i];
      if (ids_[i]->qp != nullptr) rdma_destroy_qp(ids_[i]);
      rdma_destroy_id(ids_[i]);
      ids_[i] = nullptr;
      return start(i, why);
    }
    why = std::string("rdma_connect: ") + std::strerror(err);
    return false;
  }

  struct Event {
    uint64_t index = 0;  // the connection's number
    rdma_cm_id* id = nullptr;
    rdma_cm_event_type type{};
    int status = 0;
    std::string rejectReason;  // a reject's: the server's reason, or its status
  };
  // The next CM event within `ms`, already acked; false if none came.
  bool next(int ms, Event& out) {
    pollfd p{channel_->fd, POLLIN, 0};
    rdma_cm_event* event = nullptr;
    if (poll(&p, 1, ms) <= 0 || rdma_get_cm_event(channel_, &event) != 0) return false;
    out.id = event->id;
    out.index = reinterpret_cast<uintptr_t>(event->id->context);
    out.type = event->event;
    out.status = event->status;
    out.rejectReason.clear();
    if (out.type == RDMA_CM_EVENT_REJECTED) out.rejectReason = hostile::rejectReason(*event, "status " + std::to_string(out.status));
    rdma_ack_cm_event(event);
    return true;
  }

  // A QP of one send and one receive for `id`, on the flood's PD and CQ (`cqDepth` entries, made on
  // first use); false with `why`.
  bool createQp(rdma_cm_id* id, int cqDepth, std::string& why) {
    if (pd_ == nullptr) pd_ = ibv_alloc_pd(id->verbs);
    if (cq_ == nullptr && pd_ != nullptr) cq_ = ibv_create_cq(id->verbs, cqDepth, nullptr, nullptr, 0);
    ibv_qp_init_attr attr{};
    attr.send_cq = attr.recv_cq = cq_;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    if (cq_ != nullptr && rdma_create_qp(id, pd_, &attr) == 0) return true;
    why = std::string("rdma_create_qp: ") + std::strerror(errno);
    return false;
  }

 private:
  addrinfo* ai_ = nullptr;
  rdma_event_channel* channel_ = nullptr;
  std::vector<rdma_cm_id*> ids_;
  std::vector<uint8_t> portRetries_;  // per connection: new ids after EADDRINUSE
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

}  // namespace evrdma::hostile
