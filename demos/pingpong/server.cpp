// pingpong-server: a persistent ping-sr server (OFA ping-sr-4 design on evrdma): it serves any
// number of clients at once, echoing each message, from one thread. SIGINT/SIGTERM stop it cleanly.
#include <getopt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "CommandLine.h"
#include "Figures.h"
#include "FiguresHttp.h"
#include "MemoryFigures.h"
#include "ProgressLine.h"
#include "ServerLifetime.h"
#include "PingPong.h"
#include "evrdma/Listener.h"
#include "evrdma/Reactor.h"
#include "evrdma/ReactorThread.h"
#include "evrdma/Watch.h"

namespace {

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s [options]\n"
               "Serves ping-sr clients (OFA ping-sr protocol: private data {count, data_size}, every\n"
               "message echoed back), many at once, until SIGINT or SIGTERM.\n"
               "  -a ADDR   address to listen on (numeric IPv4/IPv6; default 0.0.0.0)\n"
               "  -p PORT   port (default %u)\n"
               "  -B N      connect requests the kernel keeps waiting for the server (default 0: the\n"
               "            kernel's limit, net.rdma_ucm.max_backlog); past it bursts of connects time out\n"
               "  -A N      connect requests answered per loop turn (default 4; 0: no limit): fewer keep\n"
               "            connected clients served smoothly while a storm of connects comes in\n"
               "  -c N      largest count a client may ask for (default 1000000000)\n"
               "  -s BYTES  largest data_size a client may ask for (default 16777216)\n"
               "  -m N      at most N clients at once; more are rejected (default 0: no limit)\n"
               "  -W MS     how long an accepted client may take to complete its connection (default\n"
               "            10000; 0: for ever), and with -K to say its hello; then its agent fails and\n"
               "            its memory goes back\n"
               "  -U MIB    most memory pinned at once for clients accepted but not yet connected (default\n"
               "            0: a quarter of -M, per worker with -w); past it requests wait their turn\n"
               "  -M MIB    most memory registered for all clients together, in MiB (default 1024; 0:\n"
               "            no limit; with -w, shared evenly by the workers): past it a request is\n"
               "            rejected saying what is in use and how many such clients the budget holds\n"
               "  -e N      exit after serving N clients (default 0: never)\n"
               "  -w N      one loop per core: N worker threads, each with its Reactor, take the accepted\n"
               "            clients (the fewest agents first); the main thread listens (default 0: one thread)\n"
               "  -S        agents receive through one shared receive queue (SRQ) per device, fed from\n"
               "            one pool that grows when the device says it runs low, instead of a ring each\n"
               "  -D        disconnect as soon as the last echo was sent (as the OFA notes' agent does)\n"
               "  -K MS     keepalive: framed connections (evrdma's frames around the messages: clients\n"
               "            must say -K too), a client silent for MS ms is probed, closed after 3 x MS\n"
               "  -C        copy each echo into a send buffer (postSend) instead of sending it from the\n"
               "            buffer its message arrived in (sendReceived, the default: one receive buffer\n"
               "            more per client); for comparison\n"
               "  -P USEC   adaptive polling: after a completion, poll the CQs on every loop turn for USEC\n"
               "            microseconds instead of sleeping until the next event (default 0: never)\n"
               "  -G USEC   stretch the -P window, up to USEC, to cover the gap between completions the\n"
               "            loop last slept through (round trips longer than -P; default 0: never)\n"
               "  -v        accepted for parity with ping-sr (the client verifies the echoes)\n"
               "  -t        trace connections;  -T  trace every message too\n"
               "  -x        print figures: per client, and totals with CPU use, poll histogram and memory\n"
               "            per agent by category (heap, pinned, provider queues, RSS) at the most agents\n"
               "  -H PORT   serve the figures over HTTP on 127.0.0.1:PORT (0: any free one): GET /metrics\n"
               "            (Prometheus text), GET /agents (JSON, listed a slice of agents at a time)\n"
               "  -l        a progress line a second: agents held and how many came or went, CPU use, and\n"
               "            the loop's longest stall in that second (how late a 10 ms timer fired, and the\n"
               "            most CPU its thread used between two ticks)\n"
               "  -h        this help\n",
               prog, pingsr::kDefaultPort);
}

}  // namespace

int main(int argc, char** argv) {
  // A server's lines are read as they come (by people and scripts tailing its log): one at a time,
  // also when stdout is a file or a pipe.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string address = "0.0.0.0";
  unsigned long long port = pingsr::kDefaultPort, maxCount = 1000000000, maxSize = 16u << 20, maxAgents = 0, exitAfter = 0;
  pingpong::Trace trace = pingpong::Trace::Off;
  bool figures = false, progress = false, disconnectAfterLast = false, sharedReceives = false, copyEchoes = false;
  unsigned long long backlog = 0;  // the kernel's limit
  unsigned long long keepaliveMs = 0, httpPort = 0;
  bool serveHttp = false;
  unsigned long long workerCount = 0, pollingWindow = 0, pollingStretch = 0, budgetMiB = 1024, acceptTimeoutMs = 10000, unestablishedMiB = 0;
  evrdma::ListenerOptions listenerOptions;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:B:A:c:s:m:M:W:U:e:w:P:G:K:H:SDCvtTxlh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port); break;
      case 'B': ok = pingpong::parseNumber(optarg, 1 << 20, backlog); break;
      case 'A': {
        unsigned long long perTurn = 0;
        ok = pingpong::parseNumber(optarg, 1 << 20, perTurn);
        listenerOptions.acceptsPerTurn = static_cast<uint32_t>(perTurn);
        break;
      }
      case 'c': ok = pingpong::parseNumber(optarg, ~0ull, maxCount) && maxCount > 0; break;
      case 's': ok = pingpong::parseNumber(optarg, 1ull << 30, maxSize) && maxSize > 0; break;
      case 'm': ok = pingpong::parseNumber(optarg, 1u << 20, maxAgents); break;
      case 'M': ok = pingpong::parseNumber(optarg, 1ull << 30, budgetMiB); break;
      case 'W': ok = pingpong::parseNumber(optarg, 86400000, acceptTimeoutMs); break;
      case 'U': ok = pingpong::parseNumber(optarg, 1ull << 30, unestablishedMiB); break;
      case 'e': ok = pingpong::parseNumber(optarg, ~0ull, exitAfter); break;
      case 'D': disconnectAfterLast = true; break;
      case 'K': ok = pingpong::parseNumber(optarg, 86400000, keepaliveMs) && keepaliveMs > 0; break;
      case 'S': sharedReceives = true; break;
      case 'H': ok = pingpong::parseNumber(optarg, 65535, httpPort); serveHttp = true; break;
      case 'C': copyEchoes = true; break;
      case 'w': ok = pingpong::parseNumber(optarg, 64, workerCount); break;
      case 'P': ok = pingpong::parseNumber(optarg, 10000000, pollingWindow); break;
      case 'G': ok = pingpong::parseNumber(optarg, 10000000, pollingStretch); break;
      case 'v': break;
      case 't': trace = pingpong::Trace::Connections; break;
      case 'T': trace = pingpong::Trace::Messages; break;
      case 'x': figures = true; break;
      case 'l': progress = true; break;
      case 'h': usage(stdout, argv[0]); return 0;
      default: usage(stderr, argv[0]); return 2;
    }
    if (!pingpong::optionsAreGood("pingpong-server", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("pingpong-server", optind, argc, argv)) return 2;

  evrdma::Reactor reactor;
  // The workers hand the agent-closed checks back to this loop (Reactor::post).
  if (!reactor.valid() || reactor.acceptPosts() != 0) {
    std::fprintf(stderr, "pingpong-server: cannot create an event loop\n");
    return 1;
  }
  reactor.setPollingWindow(std::chrono::microseconds(pollingWindow));
  reactor.setPollingStretch(std::chrono::microseconds(pollingStretch));
  // Each client pins about 5 x its data_size (receives, a spare, send buffers): without a budget a few
  // clients asking for the largest size could pin all the machine's memory.
  const uint64_t budget = budgetMiB << 20;
  reactor.setMemoryBudget(budget);
  pingsr::Limits limits{maxCount, maxSize};
  pingpong::EchoFactory factory(limits, trace, 0);
  listenerOptions.maxAgents = maxAgents;  // the Listener refuses past it before the factory is asked
  listenerOptions.acceptTimeout = std::chrono::milliseconds(acceptTimeoutMs);
  if (keepaliveMs > 0) listenerOptions.helloTimeout = std::chrono::milliseconds(acceptTimeoutMs);  // -K: framed
  listenerOptions.maxUnestablishedMemory = unestablishedMiB << 20;
  // Declared after the factory: the workers (and the agents on them) go before it.
  std::vector<std::unique_ptr<evrdma::ReactorThread>> workers;
  for (unsigned long long w = 0; w < workerCount; ++w) {
    workers.push_back(std::make_unique<evrdma::ReactorThread>());
    if (!workers.back()->valid()) {
      std::fprintf(stderr, "pingpong-server: cannot start worker thread %llu\n", w);
      return 1;
    }
    evrdma::Reactor& worker = workers.back()->reactor();
    const uint64_t share = budget == 0 ? 0 : std::max<uint64_t>(1, budget / workerCount);
    workers.back()->runAndWait([&worker, pollingWindow, pollingStretch, share] {
      worker.setPollingWindow(std::chrono::microseconds(pollingWindow));
      worker.setPollingStretch(std::chrono::microseconds(pollingStretch));
      worker.setMemoryBudget(share);
    });
    listenerOptions.workers.push_back(&worker);
  }
  factory.disconnectAfterLastEcho = disconnectAfterLast;
  factory.sharedReceiveQueue = sharedReceives;
  factory.keepalive = std::chrono::milliseconds(keepaliveMs);
  factory.echoFromReceiveBuffer = !copyEchoes;
  evrdma::Listener::Ptr listener = evrdma::Listener::create(reactor, factory, listenerOptions);
  pingpong::CpuMeter cpu;
  pingpong::TransferMeter transfer;
  factory.transfer = &transfer;
  pingpong::DeviceFigures completions;
  pingpong::ServerLifetime lifetime("pingpong-server", reactor, *listener, factory.activeAgents);
  // With workers this runs on theirs (one at a time: the factory holds its closedMutex).
  factory.agentClosedHook = [&](const pingpong::EchoAgent& agent, const evrdma::Connection& c) {
    if (completions.completions == nullptr) completions.note(c);
    if (figures) {
      // The transfer alone (first message to last echo), as ping-sr times it; else its whole life.
      const bool whole = agent.firstMessage != pingpong::Clock::time_point{} &&
                         agent.lastEcho != pingpong::Clock::time_point{};
      double seconds = whole ? std::chrono::duration<double>(agent.lastEcho - agent.firstMessage).count()
                     : agent.established == pingpong::Clock::time_point{}
                         ? 0.0
                         : std::chrono::duration<double>(agent.closed - agent.established).count();
      std::printf("agent %s: %llu echoes of %llu B in %.3f s%s%s%s%s\n", c.peerAddress().c_str(),
                  static_cast<unsigned long long>(agent.echoed()), static_cast<unsigned long long>(agent.info().dataSize),
                  seconds, whole ? ": " : "",
                  whole ? pingpong::transferFigures(agent.echoed(), agent.info().dataSize, seconds).c_str() : "",
                  agent.error.empty() ? "" : ", error: ", agent.error.c_str());
    }
    const uint64_t served = factory.agentsServed;
    (void)reactor.post([&lifetime, served, exitAfter] { lifetime.agentClosed(served, exitAfter); });  // the loop's thread
  };

  if (int rc = listener->listen(address, static_cast<uint16_t>(port), static_cast<int>(backlog)); rc != 0) {
    std::fprintf(stderr, "pingpong-server: cannot listen on %s port %llu: %s%s\n", address.c_str(), port,
                 std::strerror(-rc), pingpong::setupErrorHint(rc));
    return 1;
  }
  // -x: memory per agent, idle against the most agents (sampled when they stop growing).
  pingpong::MemoryFigures memory;
  memory.idle();
  evrdma::Timer sampleMemory(reactor, [&] { memory.agents(factory.activeAgents); });
  if (figures) sampleMemory.startPeriodic(std::chrono::milliseconds(1000));
  pingpong::ProgressLine progressLine(reactor, "pingpong-server", [&] { return static_cast<size_t>(factory.activeAgents); });
  if (progress && progressLine.start() != 0) {
    std::fprintf(stderr, "pingpong-server: cannot start the progress timers\n");
    return 1;
  }
  std::unique_ptr<embedded::FiguresServer> http;  // -H: goes before the Listener and the Reactor
  if (serveHttp) {
    std::string error;
    http = embedded::FiguresServer::start(reactor.base(), static_cast<uint16_t>(httpPort), reactor, *listener,
                                          address + ":" + std::to_string(listener->port()), error);
    if (!http) {
      std::fprintf(stderr, "pingpong-server: %s\n", error.c_str());
      return 1;
    }
    std::printf("pingpong-server: figures on http 127.0.0.1:%u (/metrics, /agents)\n", http->port());
  }
  lifetime.listening(address, listener->port(), static_cast<int>(backlog));
  factory.listenerErrorHook = [&lifetime](int err) { lifetime.listenerFailed(err); };
  std::printf("pingpong-server: listening on %s port %u\n", address.c_str(), listener->port());
  std::fflush(stdout);

  reactor.run();
  const evrdma::ListenerStats& stats = listener->stats();
  std::printf("pingpong-server: served %llu clients (%llu failed, %llu left early), %llu echoes, rejected %llu requests, "
              "%llu abandoned by their clients\n",
              static_cast<unsigned long long>(factory.agentsServed), static_cast<unsigned long long>(factory.agentsFailed),
              static_cast<unsigned long long>(factory.agentsIncomplete), static_cast<unsigned long long>(factory.totalEchoes),
              static_cast<unsigned long long>(stats.rejected), static_cast<unsigned long long>(stats.abandoned));
  if (figures) {
    pingpong::printProcessFigures("pingpong-server", cpu, completions, &transfer);
    if (progress)
      std::printf("pingpong-server: the loop's longest stall: %.1f ms; the most CPU between two 10 ms ticks: %.1f ms\n",
                  static_cast<double>(progressLine.longestStall().count()) / 1000,
                  static_cast<double>(progressLine.mostCpuBetweenTicks().count()) / 1000);
    std::printf("pingpong-server: %s\n", memory.describe().c_str());
    if (sharedReceives) {
      // The workers' own (read on their threads; that also lets each finish what it was doing).
      evrdma::SharedReceiveStats srq = reactor.sharedReceiveStats();
      for (auto& worker : workers)
        worker->runAndWait([&] { srq += worker->reactor().sharedReceiveStats(); });
      std::printf("pingpong-server: shared receive queues: %u, %llu buffers (%llu KiB registered, %llu guaranteed), "
                  "%llu low-watermark events, grew %llu times (%llu refused)\n",
                  srq.queues, static_cast<unsigned long long>(srq.buffers),
                  static_cast<unsigned long long>(srq.registeredBytes / 1024), static_cast<unsigned long long>(srq.reserved),
                  static_cast<unsigned long long>(srq.lowWatermarkEvents), static_cast<unsigned long long>(srq.growths),
                  static_cast<unsigned long long>(srq.growthRefusals));
    }
    std::printf("pingpong-server: listener: %llu requests, %llu accepted, %llu rejected (%llu past -m, %llu past the "
                "waiting limit), %llu abandoned by their clients, %llu answered on a later loop turn (-A), %llu waited "
                "for memory (-U), at most %llu MiB pinned at once for clients not yet connected\n",
                static_cast<unsigned long long>(stats.requests), static_cast<unsigned long long>(stats.accepted),
                static_cast<unsigned long long>(stats.rejected), static_cast<unsigned long long>(stats.rejectedBusy),
                static_cast<unsigned long long>(stats.rejectedWaiting), static_cast<unsigned long long>(stats.abandoned),
                static_cast<unsigned long long>(stats.heldForLaterTurn), static_cast<unsigned long long>(stats.heldForMemory),
                static_cast<unsigned long long>(stats.mostUnestablishedMemory >> 20));
    for (auto& worker : workers) worker->runAndWait([] {});  // each has finished its last agent
    const std::vector<evrdma::WorkerFigures> perWorker = listener->workerFigures();
    for (size_t w = 0; w < perWorker.size(); ++w)
      std::printf("pingpong-server: worker %zu: %llu clients accepted, %llu closed, %llu could not be set up, %llu "
                  "abandoned, %llu waited for memory\n",
                  w, static_cast<unsigned long long>(perWorker[w].accepted),
                  static_cast<unsigned long long>(perWorker[w].closed),
                  static_cast<unsigned long long>(perWorker[w].rejected),
                  static_cast<unsigned long long>(perWorker[w].abandoned),
                  static_cast<unsigned long long>(perWorker[w].heldForMemory));
  }
  http.reset();
  listener.reset();
  // Clients cut short by a signal are a clean shutdown; errors, or clients that left early
  // otherwise, are not.
  return factory.agentsFailed == 0 && (factory.agentsIncomplete == 0 || lifetime.stoppedBySignal()) ? 0 : 1;
}
