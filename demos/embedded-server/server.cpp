// embedded-server: an application built on libevent, as it was before RDMA came: an HTTP server
// (evhttp), a periodic timer and signal handlers on its own event_base. It adds an RDMA echo
// service on the same base and thread with evrdma (the part marked "evrdma" below), and shows its
// figures over HTTP:
//   GET /metrics   Prometheus text: the listener, the reactor, each device, the application
//   GET /agents    JSON: each agent's peer, state, age, messages and bytes each way, backlog
// SIGINT or SIGTERM drains it: no new connections, the agents get GRACE ms to finish, then are
// closed; it exits 0 once the last has closed. A second signal closes them at once.
#include <event2/event.h>
#include <event2/http.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "CommandLine.h"
#include "EchoProtocol.h"
#include "FiguresHttp.h"
#include "Metrics.h"
#include "evrdma/Listener.h"
#include "evrdma/Log.h"
#include "evrdma/Reactor.h"

namespace {

const char* const kUsage =
    "usage: embedded-server -a ADDRESS [-p PORT] [-H HTTP_PORT] [-g GRACE_MS] [-k KEEPALIVE_MS]\n"
    "                       [-I IDLE_MS] [-m MAX_AGENTS] [-t TICK_MS] [-d DEPTH] [-v]\n"
    "  -a ADDRESS     the numeric address to serve RDMA on (0.0.0.0: all)\n"
    "  -p PORT        the RDMA echo service's port (default 7475; 0: any free one)\n"
    "  -H HTTP_PORT   the HTTP port on 127.0.0.1 for /metrics and /agents (default 9475; 0: any free one)\n"
    "  -g GRACE_MS    on SIGINT/SIGTERM, how long agents may go on before they are closed (default 5000)\n"
    "  -k MS          keepalive: probe a client silent for MS ms; close it after 3 x MS (default off)\n"
    "  -I MS          close an agent that moved no message for MS ms (default off)\n"
    "  -m MAX_AGENTS  reject connect requests past this many agents (default 1024)\n"
    "  -t TICK_MS     the application's own periodic timer (default 1000)\n"
    "  -d DEPTH       receives and sends posted per agent, 5 .. 64 (default 8): a client may keep\n"
    "                 this many messages in flight (echo-client -d, -w)\n"
    "  -v             report the library's log (info and above) on stderr\n"
    "Prints 'rdma ADDRESS:PORT http 127.0.0.1:PORT' once it serves.\n";

struct App {
  event_base* base = nullptr;
  evrdma::Listener* listener = nullptr;  // the evrdma part
  evrdma::Reactor* reactor = nullptr;
  std::string listenerLabel;
  embedded::AppFigures figures;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::chrono::milliseconds grace{5000};
  int signals = 0;
};

void onHttp(evhttp_request* request, void* arg) {
  App& app = *static_cast<App*>(arg);
  ++app.figures.httpRequests;
  const std::string uri = evhttp_request_get_uri(request);
  const std::string path = uri.substr(0, uri.find('?'));
  app.figures.uptimeSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - app.started).count();
  if (path == "/metrics")
    embedded::replyMetrics(request, *app.reactor, *app.listener, app.listenerLabel, app.figures);
  else if (path == "/agents")
    embedded::replyAgents(request, *app.listener);  // a slice of agents a turn: thousands never hold the loop
  else
    evhttp_send_error(request, HTTP_NOTFOUND, "try /metrics or /agents");
}

void onTick(evutil_socket_t, short, void* arg) { ++static_cast<App*>(arg)->figures.ticks; }

void onSignal(evutil_socket_t signo, short, void* arg) {
  App& app = *static_cast<App*>(arg);
  const bool again = app.signals++ > 0;
  std::printf("embedded-server: %s: %s %zu agents\n", strsignal(static_cast<int>(signo)),
              again ? "closing" : "draining", app.listener->agentCount());
  std::fflush(stdout);
  // evrdma: stop accepting, give the agents the grace period, and leave the loop after the last.
  app.listener->drain(again ? std::chrono::milliseconds(0) : app.grace, [&app] {
    std::printf("embedded-server: drained\n");
    event_base_loopexit(app.base, nullptr);
  });
}

// evrdma: the echo service, one handler per agent.
struct Echo final : evrdma::ConnectionHandler {
  void onRecv(evrdma::Connection& c, const uint8_t* data, size_t length) noexcept override {
    // The client keeps at most sendDepth messages in flight; one that sends more is closed.
    if (int rc = c.postSend(data, length); rc != 0) c.close();
  }
};

struct EchoFactory final : evrdma::AgentFactory {
  evrdma::ConnectionOptions options;
  evrdma::AcceptDecision onConnectRequest(const evrdma::ConnectRequest&) noexcept override {
    return evrdma::AcceptDecision::accept(std::make_unique<Echo>(), options);
  }
  void onListenerError(int err, const char* op) noexcept override {
    std::fprintf(stderr, "embedded-server: listener: %s: %s\n", op, std::strerror(-err));
  }
};

}  // namespace

int main(int argc, char** argv) {
  const char* address = nullptr;
  unsigned long long port = echo::kDefaultPort, httpPort = 9475, graceMs = 5000, keepaliveMs = 0, idleMs = 0,
                     maxAgents = 1024, tickMs = 1000, depth = 8;
  bool verbose = false;
  int opt;
  while ((opt = getopt_long(argc, argv, "a:p:H:g:k:I:m:t:d:vh", pingpong::kLongOptions, nullptr)) != -1) {
    bool ok = true;
    switch (opt) {
      case 'a': address = optarg; break;
      case 'p': ok = pingpong::parseNumber(optarg, 65535, port); break;
      case 'H': ok = pingpong::parseNumber(optarg, 65535, httpPort); break;
      case 'g': ok = pingpong::parseNumber(optarg, 86400000, graceMs); break;
      case 'k': ok = pingpong::parseNumber(optarg, 3600000, keepaliveMs) && keepaliveMs > 0; break;
      case 'I': ok = pingpong::parseNumber(optarg, 86400000, idleMs) && idleMs > 0; break;
      case 'm': ok = pingpong::parseNumber(optarg, 1000000, maxAgents) && maxAgents > 0; break;
      case 't': ok = pingpong::parseNumber(optarg, 3600000, tickMs) && tickMs > 0; break;
      case 'd': ok = pingpong::parseNumber(optarg, 64, depth) && depth >= 5; break;
      case 'v': verbose = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
    if (!pingpong::optionsAreGood("embedded-server", ok, opt, optarg)) return 2;
  }
  if (!pingpong::noStrayArguments("embedded-server", optind, argc, argv)) return 2;
  if (address == nullptr) {
    std::fprintf(stderr, "embedded-server: -a ADDRESS is required\n%s", kUsage);
    return 2;
  }

  // The application as it was: its loop, its HTTP server, its timer, its signals.
  App app;
  app.base = event_base_new();
  app.grace = std::chrono::milliseconds(graceMs);
  evhttp* http = evhttp_new(app.base);
  evhttp_bound_socket* bound = http ? evhttp_bind_socket_with_handle(http, "127.0.0.1", static_cast<uint16_t>(httpPort))
                                    : nullptr;
  if (bound == nullptr) {
    std::fprintf(stderr, "embedded-server: cannot serve HTTP on 127.0.0.1:%llu (port in use?)\n", httpPort);
    return 1;
  }
  evhttp_set_gencb(http, onHttp, &app);
  event* tick = event_new(app.base, -1, EV_PERSIST, onTick, &app);
  const timeval period{static_cast<time_t>(tickMs / 1000), static_cast<suseconds_t>(tickMs % 1000 * 1000)};
  event_add(tick, &period);
  event* onInt = evsignal_new(app.base, SIGINT, onSignal, &app);
  event* onTerm = evsignal_new(app.base, SIGTERM, onSignal, &app);
  event_add(onInt, nullptr);
  event_add(onTerm, nullptr);

  int status = 0;
  {
    // evrdma: a Reactor on the application's base, a Listener, the echo service.
    if (verbose) evrdma::setLogCallback(evrdma::LogLevel::Info, evrdma::logToStderr);
    evrdma::Reactor reactor(app.base);
    EchoFactory factory;
    factory.options.framed = true;
    factory.options.maxMessageSize = echo::kMaxMessage;
    factory.options.recvDepth = static_cast<uint32_t>(depth);
    factory.options.sendDepth = static_cast<uint32_t>(depth);
    factory.options.keepaliveInterval = std::chrono::milliseconds(keepaliveMs);
    factory.options.idleTimeout = std::chrono::milliseconds(idleMs);
    evrdma::ListenerOptions listenerOptions;
    listenerOptions.maxAgents = maxAgents;
    auto listener = evrdma::Listener::create(reactor, factory, listenerOptions);
    if (int rc = listener->listen(address, static_cast<uint16_t>(port)); rc != 0) {
      std::fprintf(stderr, "embedded-server: listen on %s:%llu: %s%s\n", address, port, std::strerror(-rc),
                   pingpong::setupErrorHint(rc));
      status = 1;
    } else {
      app.reactor = &reactor;
      app.listener = listener.get();
      app.listenerLabel = std::string(address) + ":" + std::to_string(listener->port());
      evutil_socket_t fd = evhttp_bound_socket_get_fd(bound);
      sockaddr_storage local{};
      socklen_t length = sizeof local;
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
      std::printf("rdma %s:%u http 127.0.0.1:%u\n", address, listener->port(),
                  ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port));
      std::fflush(stdout);
      event_base_dispatch(app.base);  // the application's loop, as before
    }
  }
  event_free(onTerm);
  event_free(onInt);
  event_free(tick);
  evhttp_free(http);
  event_base_free(app.base);
  return status;
}
