// The blast roles on evrdma (OFA blast-sr-2 and more): a client keeps `buffers` operations of
// `size` bytes in flight on a framed connection (sends, RDMA writes into a region the server lends,
// writes with immediate, or RDMA reads of a region the server sends), `count` of them, then tells
// the server it is done with an empty message; the server counts and checks what arrives. Shared by
// the demo programs and the tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "BlastProtocol.h"
#include "evrdma/BufferPool.h"
#include "ServerFactory.h"
#include "evrdma/Callbacks.h"
#include "evrdma/Connection.h"
#include "evrdma/MemoryCharge.h"
#include "evrdma/Watch.h"

namespace blast {

using Clock = std::chrono::steady_clock;

// Byte `offset` of the data of operation `seq` (its first 8 bytes hold seq itself).
inline uint8_t patternByte(uint64_t seq, size_t offset) {
  return static_cast<uint8_t>(seq * 31u + offset * 7u + (offset >> 8));
}
// Fills `size` bytes for operation `seq`: the sequence number, and the pattern if `patterned`.
void fill(uint8_t* data, size_t size, uint64_t seq, bool patterned);
// Writes bytes [from, to) of what fill() writes: for filling a large region a piece at a time.
void fillRange(uint8_t* data, size_t size, uint64_t seq, bool patterned, size_t from, size_t to);
// Checks what fill() wrote. Empty: fine; else what is wrong.
std::string check(const uint8_t* data, size_t size, uint64_t seq, bool patterned);

struct Result {
  uint32_t index = 0;
  Mode mode = Mode::Send;
  uint64_t operations = 0, bytes = 0;
  bool established = false, succeeded = false;
  std::string error;
  Clock::time_point started, finished;  // first operation posted, last one completed
  uint64_t creditWaits = 0;  // times an operation waited for the server's credits (send, write_imm)
  double seconds() const { return std::chrono::duration<double>(finished - started).count(); }
};

// The active side. Calls `done` once, from onClosed.
class BlastClient : public evrdma::ConnectionHandler {
 public:
  // `postList`: operations go to the device in lists of that many (perftest's --post_list): a
  // freed buffer waits until that many are free (or the count's end is near). 1: each at once.
  BlastClient(uint32_t index, Request request, bool trace, std::function<void(const Result&)> done,
              uint32_t postList = 1);
  static evrdma::ClientOptions options(const Request& request);

  void onEstablished(evrdma::Connection& c) noexcept override;
  void onOpDone(evrdma::Connection& c, const evrdma::OpCompletion& op) noexcept override;
  void onSendDone(evrdma::Connection& c, uint64_t tag) noexcept override;
  void onRegionGranted(evrdma::Connection& c, uint64_t tag, const evrdma::RemoteRegion& region) noexcept override;
  void onRegionRefused(evrdma::Connection& c, uint64_t tag, int err) noexcept override;
  void onRegionReceived(evrdma::Connection& c, const evrdma::RemoteRegion& region, uint64_t tag) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onRejected(evrdma::Connection& c, const evrdma::RejectInfo& info) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

 private:
  void start(evrdma::Connection& c) noexcept;
  void postNext(evrdma::Connection& c) noexcept;
  void postList(evrdma::Connection& c) noexcept;  // a list of postList_ (or what is left), in one post
  void failWith(evrdma::Connection& c, std::string error) noexcept;

  Request request_;
  bool trace_;
  std::function<void(const Result&)> done_;
  Result result_;
  evrdma::BufferPool pool_;
  evrdma::RemoteRegion remote_;
  uint64_t posted_ = 0;
  uint32_t postList_ = 1;
};

// The passive side: counts and checks; lends (write modes) or sends (read mode) its region.
class BlastAgent : public evrdma::ConnectionHandler {
 public:
  BlastAgent(Request request, bool trace) : request_(request), trace_(trace) {}
  static evrdma::ConnectionOptions options(const Request& request);

  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onRecvWithImm(evrdma::Connection& c, uint32_t imm, const uint8_t* data, size_t length) noexcept override;
  void onRegionLent(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept override;
  void onRegionReleased(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

  const Request& request() const { return request_; }
  uint64_t received() const { return received_; }  // messages (send) or immediates (write_imm)
  uint64_t receivedBytes() const { return receivedBytes_; }
  bool complete = false;  // the client said it was done, and everything checked out
  std::string error;
  Clock::time_point established, finished;
  std::function<void(const BlastAgent&, const evrdma::Connection&)> closedHook;
  // Read mode: counts this agent while it fills the region to read (the factory's counter).
  size_t* filling = nullptr;
  // Read mode: the region to read, charged to the Reactor's memory budget while the agent lives
  // (declared before offered_: given back after the region is deregistered).
  evrdma::MemoryCharge readRegionCharge;
  // Read mode: bytes of the region to read filled per loop turn, so one client's large region
  // does not hold up the others.
  static constexpr size_t kFillPerTurn = size_t{1} << 20;

 private:
  void failWith(evrdma::Connection& c, std::string error) noexcept;
  void onDone(evrdma::Connection& c) noexcept;
  void fillSome(evrdma::Connection& c) noexcept;
  void stopFilling() noexcept;
  Request request_;
  bool trace_;
  uint64_t received_ = 0, receivedBytes_ = 0;
  const evrdma::MemoryRegion* lent_ = nullptr;  // write modes: the region the client writes
  evrdma::MemoryRegion offered_;                // read mode: the region the client reads
  std::unique_ptr<evrdma::Timer> filler_;       // read mode: fills offered_ a piece per turn
  uint64_t filled_ = 0;                         // read mode: bytes of offered_ filled so far
};

class BlastFactory : public ServerFactory {
 public:
  BlastFactory(Limits limits, bool trace) : limits_(limits), trace_(trace) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest& request) noexcept override;

  // Read-mode agents register the region their client reads themselves: each is charged to
  // `reactor`'s memory budget (Reactor::chargeMemory) from the request to the agent's close, next
  // to what evrdma registers for the agents, and a request past the budget is rejected naming it.
  void chargeReadRegionsTo(evrdma::Reactor& reactor) noexcept { reactor_ = &reactor; }

  std::atomic<size_t> activeAgents{0};  // ServerLifetime reads it
  uint64_t agentsServed = 0, agentsFailed = 0, agentsIncomplete = 0;  // rejections: Listener::stats()
  size_t regionsBeingFilled = 0;  // read-mode agents filling their region now
  std::function<void(const BlastAgent&, const evrdma::Connection&)> agentClosedHook;

 private:
  Limits limits_;
  bool trace_;
  evrdma::Reactor* reactor_ = nullptr;
};

// "send 10000 x 65536 B in 1.234 s: 531.2 MB/s, 8104 ops/s"
std::string describe(Mode mode, uint64_t operations, uint64_t size, double seconds);

}  // namespace blast
