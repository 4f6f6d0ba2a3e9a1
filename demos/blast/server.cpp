// blast-server: the receiving end of blast, persistent, many clients at once from one thread. It
// checks each client's request, lends or sends the region its mode needs, and counts and checks
// what arrives. SIGINT/SIGTERM stop it cleanly.
#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "Blast.h"
#include "CommandLine.h"
#include "Figures.h"
#include "OfaBlast.h"
#include "ServerLifetime.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s [options]\n"
               "Serves blast clients (one-way throughput: send, write, write_imm, read), many at once,\n"
               "until SIGINT or SIGTERM.\n"
               "  -a ADDR   address to listen on (numeric IPv4/IPv6; default 0.0.0.0)\n"
               "  -p PORT   port (default %u)\n"
               "  -B N      connect requests the kernel keeps waiting for the server (default 0: the\n"
               "            kernel's limit, net.rdma_ucm.max_backlog); past it bursts of connects time out\n"
               "  -A N      connect requests answered per loop turn (default 4; 0: no limit): fewer keep\n"
               "            connected clients served smoothly while a storm of connects comes in\n"
               "  -b N      most buffers in flight a client may ask for (default 1024)\n"
               "  -s BYTES  largest size a client may ask for (default 16777216)\n"
               "  -c N      largest count a client may ask for (default 1000000000)\n"
               "  -C MIB    most memory one client may have the server register, buffers x size, in\n"
               "            MiB (default 256)\n"
               "  -M MIB    most memory registered for all clients together, in MiB (default 1024; 0:\n"
               "            no limit): past it a request is rejected saying what is in use\n"
               "  -e N      exit after serving N clients (default 0: never)\n"
               "  -P USEC   adaptive polling: after a completion, poll the CQs on every loop turn for\n"
               "            USEC before sleeping on the completion channel again (default 0: never)\n"
               "  -o ofa    speak the OFA notes' blast-sr-2 instead (its private data, unframed messages,\n"
               "            8-byte acks returning credits; port %u): -b, -s, -c bound n_data_buffers,\n"
               "            data_size and limit; -v checks every byte of clients that pattern them\n"
               "  -v        (with -o ofa) check every byte against blast-client -o ofa -v's pattern\n"
               "  -t        trace connections\n"
               "  -x        print figures: per client, and CPU use, poll histogram, RNR counters\n"
               "  -h        this help\n"
               "Every message's sequence number is checked; with a client's -v, every byte too.\n"
               "Exit status: 0 when every client finished and checked out, else 1 (2: bad usage).\n",
               prog, blast::kDefaultPort, blast::ofa::kDefaultPort);
}

// blast-sr-2 on the wire (-o ofa).
int serveOfa(evrdma::Reactor& reactor, const std::string& address, uint16_t port, int backlog,
             const evrdma::ListenerOptions& listenerOptions, const blast::ofa::Limits& limits, bool verify, bool trace,
             bool figures, unsigned long long exitAfter) {
  blast::ofa::Factory factory(limits, verify);
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory, listenerOptions);
  pingpong::CpuMeter cpu;
  pingpong::DeviceFigures completions;
  pingpong::ServerLifetime lifetime("blast-server", reactor, *listener, factory.activeAgents);
  factory.agentClosedHook = [&](const blast::ofa::Agent& agent, const evrdma::Connection& c) {
    if (completions.completions == nullptr) completions.note(c);
    if (figures || trace || !agent.error.empty()) {
      const bool whole = agent.lastAck != blast::ofa::Clock::time_point{};
      const double seconds = whole ? std::chrono::duration<double>(agent.lastAck - agent.firstMessage).count() : 0.0;
      std::printf("agent %s: blast-sr-2: %s, %llu acks (threshold %llu)%s%s\n", c.peerAddress().c_str(),
                  blast::describe(blast::Mode::Send, agent.received(), agent.request().dataSize, seconds).c_str(),
                  static_cast<unsigned long long>(c.stats().messagesSent),
                  static_cast<unsigned long long>(blast::ofa::ackThreshold(agent.request().buffers)),
                  agent.error.empty() ? "" : ", error: ", agent.error.c_str());
    }
    lifetime.agentClosed(factory.agentsServed, exitAfter);
  };
  if (int rc = listener->listen(address, port, backlog); rc != 0) {
    std::fprintf(stderr, "blast-server: cannot listen on %s port %u: %s%s\n", address.c_str(), port, std::strerror(-rc),
                 pingpong::setupErrorHint(rc));
    return 1;
  }
  lifetime.listening(address, listener->port(), backlog);
  factory.listenerErrorHook = [&lifetime](int err) { lifetime.listenerFailed(err); };
  std::printf("blast-server: blast-sr-2 (-o ofa), listening on %s port %u\n", address.c_str(), listener->port());
  std::fflush(stdout);
  reactor.run();
  std::printf("blast-server: served %llu blast-sr-2 clients (%llu failed, %llu left early), rejected %llu requests\n",
              static_cast<unsigned long long>(factory.agentsServed), static_cast<unsigned long long>(factory.agentsFailed),
              static_cast<unsigned long long>(factory.agentsIncomplete),
              static_cast<unsigned long long>(listener->stats().rejected));
  if (figures) pingpong::printProcessFigures("blast-server", cpu, completions);
  listener.reset();
  return factory.agentsFailed == 0 && (factory.agentsIncomplete == 0 || lifetime.stoppedBySignal()) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // A server's lines are read as they come (by people and scripts tailing its log): one at a time,
  // also when stdout is a file or a pipe.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string address = "0.0.0.0";
  unsigned long long port = blast::kDefaultPort, maxBuffers = 1024, maxSize = 16u << 20, maxCount = 1000000000,
                     exitAfter = 0, pollingWindow = 0, perClientMiB = 256, budgetMiB = 1024;
  bool trace = false, figures = false, ofa = false, verify = false, portGiven = false;
  unsigned long long backlog = 0;  // the kernel's limit
  evrdma::ListenerOptions listenerOptions;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:B:A:b:s:c:C:M:e:o:P:vtxh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port); portGiven = true; break;
      case 'o': ok = std::string(optarg) == "ofa"; ofa = true; break;
      case 'v': verify = true; break;
      case 'B': ok = pingpong::parseNumber(optarg, 1 << 20, backlog); break;
      case 'A': {
        unsigned long long perTurn = 0;
        ok = pingpong::parseNumber(optarg, 1 << 20, perTurn);
        listenerOptions.acceptsPerTurn = static_cast<uint32_t>(perTurn);
        break;
      }
      case 'b': ok = pingpong::parseNumber(optarg, 4096, maxBuffers) && maxBuffers > 0; break;
      case 's': ok = pingpong::parseNumber(optarg, 1u << 30, maxSize) && maxSize > 0; break;
      case 'c': ok = pingpong::parseNumber(optarg, ~0ull, maxCount) && maxCount > 0; break;
      case 'e': ok = pingpong::parseNumber(optarg, ~0ull, exitAfter); break;
      case 'C': ok = pingpong::parseNumber(optarg, 1ull << 30, perClientMiB) && perClientMiB > 0; break;
      case 'M': ok = pingpong::parseNumber(optarg, 1ull << 30, budgetMiB); break;
      case 'P': ok = pingpong::parseNumber(optarg, 10000000, pollingWindow); break;
      case 't': trace = true; break;
      case 'x': figures = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("blast-server", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("blast-server", optind, argc, argv)) return 2;

  evrdma::Reactor reactor;
  if (!reactor.valid()) {
    std::fprintf(stderr, "blast-server: cannot create an event loop\n");
    return 1;
  }
  reactor.setPollingWindow(std::chrono::microseconds(pollingWindow));
  reactor.setMemoryBudget(budgetMiB << 20);  // read-mode regions are charged to it too
  if (ofa) {
    if (!portGiven) port = blast::ofa::kDefaultPort;
    return serveOfa(reactor, address, static_cast<uint16_t>(port), static_cast<int>(backlog), listenerOptions,
                    blast::ofa::Limits{maxCount, maxSize, maxBuffers}, verify, trace, figures, exitAfter);
  }
  blast::Limits limits{static_cast<uint32_t>(maxBuffers), static_cast<uint32_t>(maxSize), maxCount, perClientMiB << 20};
  blast::BlastFactory factory(limits, trace);
  factory.chargeReadRegionsTo(reactor);
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory, listenerOptions);
  pingpong::CpuMeter cpu;
  pingpong::DeviceFigures completions;
  pingpong::ServerLifetime lifetime("blast-server", reactor, *listener, factory.activeAgents);
  factory.agentClosedHook = [&](const blast::BlastAgent& agent, const evrdma::Connection& c) {
    if (completions.completions == nullptr) completions.note(c);
    if (figures || !agent.error.empty()) {
      const double seconds = std::chrono::duration<double>(agent.finished - agent.established).count();
      const blast::Request& r = agent.request();
      std::printf("agent %s: %s, %llu credit-only frames sent%s%s\n", c.peerAddress().c_str(),
                  blast::describe(r.mode, agent.complete ? r.count : agent.received(), r.size, seconds).c_str(),
                  static_cast<unsigned long long>(c.stats().creditFramesSent), agent.error.empty() ? "" : ", error: ",
                  agent.error.c_str());
    }
    lifetime.agentClosed(factory.agentsServed, exitAfter);
  };

  if (int rc = listener->listen(address, static_cast<uint16_t>(port), static_cast<int>(backlog)); rc != 0) {
    std::fprintf(stderr, "blast-server: cannot listen on %s port %llu: %s%s\n", address.c_str(), port,
                 std::strerror(-rc), pingpong::setupErrorHint(rc));
    return 1;
  }
  lifetime.listening(address, listener->port(), static_cast<int>(backlog));
  factory.listenerErrorHook = [&lifetime](int err) { lifetime.listenerFailed(err); };
  std::printf("blast-server: listening on %s port %u\n", address.c_str(), listener->port());
  std::fflush(stdout);

  reactor.run();
  std::printf("blast-server: served %llu clients (%llu failed, %llu left early), rejected %llu requests, %llu abandoned by "
              "their clients\n",
              static_cast<unsigned long long>(factory.agentsServed), static_cast<unsigned long long>(factory.agentsFailed),
              static_cast<unsigned long long>(factory.agentsIncomplete), static_cast<unsigned long long>(listener->stats().rejected),
              static_cast<unsigned long long>(listener->stats().abandoned));
  if (figures) pingpong::printProcessFigures("blast-server", cpu, completions);
  listener.reset();
  return factory.agentsFailed == 0 && (factory.agentsIncomplete == 0 || lifetime.stoppedBySignal()) ? 0 : 1;
}
