// remote_memory: one-sided RDMA on framed connections, both sides in one program on one loop. The
// client asks the server to lend it a region (requestRegion), writes a message into it from a
// region of its own (rdmaWrite), reads it back into another (rdmaRead), checks it and gives the
// region back (releaseRegion). The server's handler hears only that it lent the region and got it
// back, holding the message: the data moved without its CPU. Then the server hangs up.
//   usage: remote_memory ADDRESS   (an address on an RDMA device: EVRDMA_RDMA_IP in the test bed)
#include <event2/event.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "evrdma/Client.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

namespace {

constexpr char kMessage[] = "written and read back by RDMA, without the server's CPU";
constexpr size_t kRegionSize = 4096;
enum Tag : uint64_t { kAskForRegion = 1, kWrite, kRead };

struct Run {
  event_base* base = nullptr;
  int open = 0;  // connections not closed yet: the loop ends with the last
  int status = 1;
  void onSideClosed() {
    if (--open == 0) event_base_loopbreak(base);
  }
};

void report(evrdma::Connection& c, int err, const char* op) {
  std::fprintf(stderr, "%s: %s: %s\n", c.isClient() ? "client" : "server", op, std::strerror(-err));
}

struct Lender : evrdma::ConnectionHandler {
  explicit Lender(Run& r) : run(r) {}
  void onRegionLent(evrdma::Connection&, const evrdma::MemoryRegion& region) noexcept override {
    std::printf("server: lent %zu bytes\n", region.length());
  }
  void onRegionReleased(evrdma::Connection& c, const evrdma::MemoryRegion& region) noexcept override {
    // Still valid during this call, gone after it.
    std::printf("server: the region came back holding \"%.*s\"\n", static_cast<int>(sizeof kMessage - 1),
                reinterpret_cast<const char*>(region.data()));
    c.close();
  }
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override { report(c, err, op); }
  void onClosed(evrdma::Connection&) noexcept override { run.onSideClosed(); }
  Run& run;
};

struct Lenders : evrdma::AgentFactory {
  explicit Lenders(Run& r) : run(r) {}
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    evrdma::ConnectionOptions options;
    options.framed = true;  // the region exchange needs it (both sides)
    options.maxLentBytes = kRegionSize;  // lending is off unless the application turns it on
    ++run.open;
    return evrdma::AcceptDecision::accept(std::make_unique<Lender>(run), options);
  }
  Run& run;
};

struct Borrower : evrdma::ConnectionHandler {
  explicit Borrower(Run& r) : run(r) {}
  void onEstablished(evrdma::Connection& c) noexcept override {
    // Our own memory, registered with the connection's protection domain (it may outlive it).
    int error = 0;
    source = evrdma::MemoryRegion::allocate(c.protectionDomain(), kRegionSize, evrdma::kLocalWrite, error);
    if (source) target = evrdma::MemoryRegion::allocate(c.protectionDomain(), kRegionSize, evrdma::kLocalWrite, error);
    if (!source || !target) return fail(c, error, "MemoryRegion::allocate");
    std::memcpy(source.data(), kMessage, sizeof kMessage);
    if (int rc = c.requestRegion(kRegionSize, evrdma::kRemoteRead | evrdma::kRemoteWrite, kAskForRegion); rc != 0)
      fail(c, rc, "requestRegion");
  }
  void onRegionGranted(evrdma::Connection& c, uint64_t, const evrdma::RemoteRegion& region) noexcept override {
    lent = region;
    if (int rc = c.rdmaWrite(evrdma::Slice{&source, 0, sizeof kMessage}, lent, 0, kWrite); rc != 0)
      fail(c, rc, "rdmaWrite");
  }
  void onRegionRefused(evrdma::Connection& c, uint64_t, int err) noexcept override { fail(c, err, "requestRegion"); }
  void onOpDone(evrdma::Connection& c, const evrdma::OpCompletion& done) noexcept override {
    if (done.status != IBV_WC_SUCCESS) return;  // onError says why
    if (done.tag == kWrite) {  // in the server's memory now: read it back
      if (int rc = c.rdmaRead(evrdma::Slice{&target, 0, sizeof kMessage}, lent, 0, kRead); rc != 0)
        fail(c, rc, "rdmaRead");
      return;
    }
    const bool same = std::memcmp(target.data(), kMessage, sizeof kMessage) == 0;
    std::printf("client: wrote %zu bytes into the server's memory and read them back: %s\n", sizeof kMessage,
                same ? "the same" : "DIFFERENT");
    run.status = same ? 0 : 1;
    if (int rc = c.releaseRegion(lent); rc != 0) fail(c, rc, "releaseRegion");  // the server hangs up then
  }
  void onError(evrdma::Connection& c, int err, const char* op) noexcept override { report(c, err, op); }
  void onClosed(evrdma::Connection&) noexcept override { run.onSideClosed(); }
  void fail(evrdma::Connection& c, int err, const char* op) {
    report(c, err, op);
    c.close();
  }
  Run& run;
  evrdma::MemoryRegion source, target;
  evrdma::RemoteRegion lent;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout, "usage: %s ADDRESS  (an address on an RDMA device)\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  Run run;
  run.base = event_base_new();
  {
    evrdma::Reactor reactor(run.base);
    Lenders lenders(run);
    evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, lenders);
    evrdma::ClientOptions options;
    options.framed = true;
    evrdma::Client::Ptr client = evrdma::Client::create(reactor, std::make_unique<Borrower>(run), options);
    int rc = listener->listen(argv[1], 0);
    const char* op = "listen";
    if (rc == 0) {
      rc = client->connect(argv[1], listener->port());
      op = "connect";
    }
    if (rc != 0) {
      std::fprintf(stderr, "%s %s: %s\n", op, argv[1], std::strerror(-rc));  // no callback will fire
    } else {
      ++run.open;
      event_base_dispatch(run.base);
    }
  }
  event_base_free(run.base);
  return run.status;
}
