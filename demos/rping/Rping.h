// rping on evrdma: the protocol of rdma-core's rping (librdmacm/examples), so that either side
// interoperates with the real one. Per ping:
//   client: fill its start buffer with text, send {addr, rkey, size} of it      (16 bytes, big-endian)
//   server: RDMA-read that buffer, then send "go ahead"                        (16 bytes, ignored)
//   client: send {addr, rkey, size} of its second (rdma) buffer
//   server: RDMA-write what it read into that buffer (strlen + 1 bytes), send "go ahead"
//   client: the rdma buffer must now equal the start buffer (-V)
// Unframed connections (rping knows no evrdma frames), one message at a time each way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "evrdma/Callbacks.h"
#include "evrdma/Connection.h"

namespace rping {

constexpr uint16_t kDefaultPort = 7174;
constexpr size_t kInfoSize = 16;     // struct rping_rdma_info: u64 buf, u32 rkey, u32 size
constexpr size_t kMinSize = 26;      // room for "rdma-ping-2147483647: " and its terminator
constexpr size_t kMaxSize = 65535;

struct Info {
  uint64_t address = 0;
  uint32_t rkey = 0;
  uint32_t size = 0;
};
void encode(const Info& info, uint8_t* out);  // kInfoSize bytes
Info decode(const uint8_t* in);

// Fills `size` bytes for ping `ping` as rping does: "rdma-ping-N: ", then letters cycling from
// one that moves on with every ping, and a terminating 0.
void fillPing(char* buffer, size_t size, uint64_t ping);

struct Settings {
  size_t size = 64;
  uint64_t count = 0;  // 0: ping until stopped
  bool verbose = false, validate = false, debug = false;
};

struct Outcome {
  uint64_t pings = 0;
  bool ok = false;
  std::string error;
};

// The client: ping after ping; closes when done. `done` is called from onClosed.
class RpingClient : public evrdma::ConnectionHandler {
 public:
  RpingClient(Settings settings, std::function<void(const Outcome&)> done) : s_(settings), done_(std::move(done)) {}
  static evrdma::ClientOptions options();
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onRejected(evrdma::Connection& c, const evrdma::RejectInfo& info) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

 private:
  void startPing(evrdma::Connection& c) noexcept;
  void advertise(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept;
  void failWith(evrdma::Connection& c, std::string error) noexcept;
  enum class Step { ReadAdvertised, WriteAdvertised } step_ = Step::ReadAdvertised;
  Settings s_;
  std::function<void(const Outcome&)> done_;
  Outcome outcome_;
  evrdma::MemoryRegion start_, rdma_;  // what the server reads; where it writes back
};

// The server side of one client: reads, answers, writes back, until the client disconnects.
class RpingAgent : public evrdma::ConnectionHandler {
 public:
  RpingAgent(Settings settings, std::function<void(const Outcome&, const evrdma::Connection&)> done)
      : s_(settings), done_(std::move(done)) {}
  static evrdma::ConnectionOptions options();
  void onEstablished(evrdma::Connection& c) noexcept override;
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override;
  void onOpDone(evrdma::Connection& c, const evrdma::OpCompletion& op) noexcept override;
  void onDisconnected(evrdma::Connection& c) noexcept override;
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override;
  void onClosed(evrdma::Connection& c) noexcept override;

 private:
  void goAhead(evrdma::Connection& c) noexcept;
  void failWith(evrdma::Connection& c, std::string error) noexcept;
  enum class Step { WaitReadAdvert, Reading, WaitWriteAdvert, Writing } step_ = Step::WaitReadAdvert;
  Settings s_;
  std::function<void(const Outcome&, const evrdma::Connection&)> done_;
  Outcome outcome_;
  evrdma::MemoryRegion buffer_;  // read into, written back from
};

}  // namespace rping
