// FiguresHttp: /agents in slices, each made when the last has gone out; a server for the figures.
#include "FiguresHttp.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <sys/socket.h>


namespace embedded {
namespace {

void replyWhole(evhttp_request* request, const char* contentType, const std::string& body) {
  evhttp_add_header(evhttp_request_get_output_headers(request), "Content-Type", contentType);
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(request, HTTP_OK, "OK", out);
  evbuffer_free(out);
}

// One /agents reply under way. Freed when its last slice is handed to evhttp, or when its
// connection goes first (evhttp then frees the request too).
struct AgentsReply {
  evhttp_request* request;
  evhttp_connection* connection;
  const evrdma::Listener& listener;
  size_t perSlice;
  evrdma::AgentWalk walk;
  bool any = false;  // an agent was listed
};

void onConnectionGone(evhttp_connection*, void* reply) { delete static_cast<AgentsReply*>(reply); }

// Called by evhttp once the last slice has been written to the socket.
void sendNextSlice(evhttp_connection*, void* arg) {
  auto* reply = static_cast<AgentsReply*>(arg);
  std::string text = reply->walk.after == 0 ? "[" : "";
  text += agentsJsonSlice(reply->listener, reply->walk, reply->perSlice);
  reply->any = reply->any || reply->walk.after != 0;
  if (reply->walk.done) text += reply->any ? "\n]\n" : "]\n";
  evbuffer* chunk = evbuffer_new();
  evbuffer_add(chunk, text.data(), text.size());
  if (reply->walk.done) {
    evhttp_connection_set_closecb(reply->connection, nullptr, nullptr);
    evhttp_send_reply_chunk(reply->request, chunk);
    evhttp_send_reply_end(reply->request);
    delete reply;
  } else {
    // Never empty here (a slice that listed nothing ends the walk): evhttp would not call back.
    evhttp_send_reply_chunk_with_cb(reply->request, chunk, sendNextSlice, reply);
  }
  evbuffer_free(chunk);
}

// One /metrics reply under way: its send backlogs summed a step a turn. Freed when it is answered,
// or when its connection goes first.
struct MetricsReply {
  evhttp_request* request;
  evhttp_connection* connection;
  const evrdma::Reactor& reactor;
  const evrdma::Listener& listener;
  std::string label;
  AppFigures app;
  size_t perStep;
  evrdma::AgentWalk walk;
  uint64_t sendBacklog = 0;
  event* step = nullptr;
  ~MetricsReply() {
    if (step != nullptr) event_free(step);
  }
};

void onMetricsConnectionGone(evhttp_connection*, void* reply) { delete static_cast<MetricsReply*>(reply); }

void metricsStep(evutil_socket_t, short, void* arg) {
  auto* reply = static_cast<MetricsReply*>(arg);
  reply->listener.forEachAgentFrom(reply->walk, reply->perStep,
                                   [reply](evrdma::Agent& agent) { reply->sendBacklog += agent.sendBacklog(); });
  if (!reply->walk.done) {
    const timeval now{0, 0};  // a timer, not event_active: the loop polls its sockets in between
    evtimer_add(reply->step, &now);
    return;
  }
  evhttp_connection_set_closecb(reply->connection, nullptr, nullptr);
  replyWhole(reply->request, "text/plain; version=0.0.4; charset=utf-8",
             prometheusText(reply->reactor, reply->listener, reply->label, reply->app, reply->sendBacklog));
  delete reply;
}

}  // namespace

void replyMetrics(evhttp_request* request, const evrdma::Reactor& reactor, const evrdma::Listener& listener,
                  std::string listenerLabel, const AppFigures& app, size_t perStep) {
  evhttp_connection* connection = evhttp_request_get_connection(request);
  auto* reply = new MetricsReply{request,    connection, reactor, listener, std::move(listenerLabel),
                                 app,        perStep < 1 ? 1 : perStep, {}, 0, nullptr};
  if (connection == nullptr || (reply->step = evtimer_new(reactor.base(), metricsStep, reply)) == nullptr) {
    delete reply;
    evhttp_send_error(request, HTTP_INTERNAL, "no memory");
    return;
  }
  evhttp_connection_set_closecb(connection, onMetricsConnectionGone, reply);
  metricsStep(-1, EV_TIMEOUT, reply);  // the first step at once: a few agents are answered in this turn
}

void replyAgents(evhttp_request* request, const evrdma::Listener& listener, size_t perSlice) {
  evhttp_connection* connection = evhttp_request_get_connection(request);
  if (evhttp_request_get_command(request) != EVHTTP_REQ_GET || connection == nullptr) {
    replyWhole(request, "application/json", agentsJson(listener));  // HEAD: evhttp writes no body chunks
    return;
  }
  evhttp_add_header(evhttp_request_get_output_headers(request), "Content-Type", "application/json");
  auto* reply = new AgentsReply{request, connection, listener, perSlice < 1 ? 1 : perSlice, {}};
  evhttp_connection_set_closecb(connection, onConnectionGone, reply);
  evhttp_send_reply_start(request, HTTP_OK, "OK");
  sendNextSlice(connection, reply);
}

std::unique_ptr<FiguresServer> FiguresServer::start(event_base* base, uint16_t port, const evrdma::Reactor& reactor,
                                                    const evrdma::Listener& listener, std::string listenerLabel,
                                                    std::string& error) {
  std::unique_ptr<FiguresServer> server(new FiguresServer(reactor, listener, std::move(listenerLabel)));
  server->http_ = evhttp_new(base);
  evhttp_bound_socket* bound =
      server->http_ != nullptr ? evhttp_bind_socket_with_handle(server->http_, "127.0.0.1", port) : nullptr;
  if (bound == nullptr) {
    error = "cannot serve HTTP on 127.0.0.1:" + std::to_string(port) + " (port in use?)";
    return nullptr;
  }
  sockaddr_in local{};
  socklen_t length = sizeof local;
  getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&local), &length);
  server->port_ = ntohs(local.sin_port);
  evhttp_set_gencb(server->http_, &FiguresServer::onRequest, server.get());
  return server;
}

FiguresServer::~FiguresServer() {
  if (http_ != nullptr) evhttp_free(http_);  // ends the replies under way (their connections go)
}

void FiguresServer::onRequest(evhttp_request* request, void* self) {
  auto& server = *static_cast<FiguresServer*>(self);
  ++server.requests_;
  const std::string uri = evhttp_request_get_uri(request);
  const std::string path = uri.substr(0, uri.find('?'));
  if (path == "/metrics") {
    AppFigures app;
    app.program = "pingpong_server";
    app.httpRequests = server.requests_;
    app.uptimeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - server.started_).count();
    replyMetrics(request, server.reactor_, server.listener_, server.label_, app);
  } else if (path == "/agents") {
    replyAgents(request, server.listener_);
  } else {
    evhttp_send_error(request, HTTP_NOTFOUND, "try /metrics or /agents");
  }
}

}  // namespace embedded
