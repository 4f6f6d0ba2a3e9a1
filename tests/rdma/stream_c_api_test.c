/* The C API as a C99 libevent program uses it, over real RDMA (run under tools/rdma-run): an
 * evrdma_listener whose streams echo every line, a client that writes 1000 lines, half-closes and
 * reads them back with evbuffer_readln until EOF, a refused connect's errno, bad arguments; then
 * a listener with two worker threads, each running its own event_base, that serve the streams.
 *   stream_c_api_test   (EVRDMA_RDMA_IP names the address) */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evrdma/evrdma.h"

enum { kLines = 1000 };

static int failures = 0;
static void check(const char* what, int ok) {
  printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  if (!ok) ++failures;
}

struct client_state {
  struct event_base* base;
  int lines, bad, eof, error, connected;
};

static void echo_read(struct bufferevent* bev, void* arg) {
  (void)arg;
  bufferevent_write_buffer(bev, bufferevent_get_input(bev)); /* every byte back */
}

static void echo_event(struct bufferevent* bev, short what, void* arg) {
  (void)arg;
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) bufferevent_free(bev); /* what it echoed goes first */
}

static void on_accept(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                      int socklen, void* arg) {
  (void)listener;
  (void)arg;
  check("the listener's callback gets the peer's address", peer != NULL && socklen > 0);
  bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void client_read(struct bufferevent* bev, void* arg) {
  struct client_state* state = arg;
  char expected[32];
  char* line;
  size_t length;
  while ((line = evbuffer_readln(bufferevent_get_input(bev), &length, EVBUFFER_EOL_LF)) != NULL) {
    snprintf(expected, sizeof expected, "line %d", state->lines);
    if (strcmp(line, expected) != 0) ++state->bad;
    ++state->lines;
    free(line);
  }
}

static void client_event(struct bufferevent* bev, short what, void* arg) {
  struct client_state* state = arg;
  (void)bev;
  if (what & BEV_EVENT_CONNECTED) state->connected = 1;
  if (what & BEV_EVENT_ERROR) state->error = EVUTIL_SOCKET_ERROR();
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
    state->eof = (what & BEV_EVENT_EOF) != 0;
    event_base_loopbreak(state->base);
  }
}

static void give_up(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  event_base_loopbreak(arg); /* bounds a hang only */
}

/* A worker: an event_base its own thread runs, an evrdma_base over it, and a pipe whose read end
 * breaks its loop (from its own thread: libevent is not told of threads here). */
enum { kWorkers = 2, kWorkerStreams = 4, kWorkerLines = 100 };
struct worker {
  struct event_base* base;
  struct evrdma_base* rbase;
  struct event* stop;
  int wake[2];
  pthread_t thread, self;
  int accepted, on_its_thread; /* written on the worker's thread only; read after the join */
};
static struct worker workers[kWorkers];
static int strays; /* streams handed out on no worker's base (never expected) */

static int timed_out;
static void time_out(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  timed_out = 1; /* bounds a hang only */
  event_base_loopbreak(arg);
}

static void stop_loop(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  event_base_loopbreak(arg);
}

static void* run_worker(void* arg) {
  struct worker* w = arg;
  w->self = pthread_self();
  event_base_dispatch(w->base);
  return NULL;
}

static void on_worker_accept(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                             int socklen, void* arg) {
  int i;
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  for (i = 0; i < kWorkers && bufferevent_get_base(bev) != workers[i].base; ++i) {
  }
  if (i == kWorkers) {
    ++strays;
  } else {
    ++workers[i].accepted;
    workers[i].on_its_thread += pthread_equal(pthread_self(), workers[i].self) ? 1 : 0;
  }
  bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void serve_on_workers(struct sockaddr_in address) {
  struct event_base* base = event_base_new();
  struct evrdma_base* rbase = evrdma_base_new(base);
  struct evrdma_base* worker_bases[kWorkers];
  struct evrdma_listener* listener;
  struct bufferevent* bevs[kWorkerStreams];
  struct client_state states[kWorkerStreams];
  struct timeval limit = {120, 0};
  int i, j, done, all_back = 1;

  for (i = 0; i < kWorkers; ++i) {
    struct worker* w = &workers[i];
    w->base = event_base_new();
    w->rbase = evrdma_base_new(w->base);
    worker_bases[i] = w->rbase;
    check("a worker's pipe", pipe(w->wake) == 0);
    w->stop = event_new(w->base, w->wake[0], EV_READ, stop_loop, w->base);
    event_add(w->stop, NULL);
  }
  address.sin_port = 0;
  errno = 0;
  check("a worker that does not accept posts is refused with EINVAL",
        evrdma_listener_new_bind_workers(rbase, on_worker_accept, NULL, 0, 0, (struct sockaddr*)&address,
                                         sizeof address, NULL, worker_bases, kWorkers) == NULL &&
            errno == EINVAL);
  for (i = 0; i < kWorkers; ++i) {
    check("evrdma_base_accept_posts", evrdma_base_accept_posts(workers[i].rbase) == 0);
    check("a worker's thread starts", pthread_create(&workers[i].thread, NULL, run_worker, &workers[i]) == 0);
  }
  listener = evrdma_listener_new_bind_workers(rbase, on_worker_accept, NULL, 0, 0, (struct sockaddr*)&address,
                                              sizeof address, NULL, worker_bases, kWorkers);
  check("evrdma_listener_new_bind_workers", listener != NULL);
  if (listener == NULL) return;
  address.sin_port = htons(evrdma_listener_get_port(listener));
  for (i = 0; i < kWorkerStreams; ++i) {
    memset(&states[i], 0, sizeof states[i]);
    states[i].base = base;
    bevs[i] = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&address, sizeof address, NULL);
    bufferevent_setcb(bevs[i], client_read, NULL, client_event, &states[i]);
    bufferevent_enable(bevs[i], EV_READ | EV_WRITE);
    for (j = 0; j < kWorkerLines; ++j) evbuffer_add_printf(bufferevent_get_output(bevs[i]), "line %d\n", j);
    evrdma_bufferevent_shutdown_write(bevs[i]);
  }
  event_base_once(base, -1, EV_TIMEOUT, time_out, base, &limit);
  while (!timed_out) {
    for (done = 0, i = 0; i < kWorkerStreams; ++i) done += states[i].eof || states[i].error;
    if (done == kWorkerStreams) break;
    event_base_loop(base, EVLOOP_ONCE);
  }
  for (i = 0; i < kWorkerStreams; ++i) {
    if (states[i].lines != kWorkerLines || states[i].bad || !states[i].eof) all_back = 0;
    bufferevent_free(bevs[i]);
  }
  check("every stream served on a worker echoed every line, then EOF", all_back);
  evrdma_listener_free(listener);
  evrdma_base_free(rbase); /* ends the listener for good, before its workers go */
  event_base_free(base);
  for (i = 0; i < kWorkers; ++i) {
    check("a worker's loop is told to stop", write(workers[i].wake[1], "x", 1) == 1);
    pthread_join(workers[i].thread, NULL);
  }
  check("each stream was handed out on its worker's loop and thread",
        strays == 0 && workers[0].on_its_thread == workers[0].accepted && workers[1].on_its_thread == workers[1].accepted);
  check("both workers took streams", workers[0].accepted > 0 && workers[1].accepted > 0 &&
                                         workers[0].accepted + workers[1].accepted == kWorkerStreams);
  for (i = 0; i < kWorkers; ++i) {
    evrdma_base_free(workers[i].rbase);
    event_free(workers[i].stop);
    event_base_free(workers[i].base);
    close(workers[i].wake[0]);
    close(workers[i].wake[1]);
  }
}

int main(void) {
  const char* ip = getenv("EVRDMA_RDMA_IP");
  struct sockaddr_in address;
  struct event_base* base = event_base_new();
  struct evrdma_base* rbase = evrdma_base_new(base);
  struct evrdma_listener* listener;
  struct bufferevent* bev;
  struct client_state state = {base, 0, 0, 0, 0, 0};
  struct evrdma_stream_options options;
  struct timeval limit = {120, 0};
  int i;

  if (ip == NULL) {
    fprintf(stderr, "EVRDMA_RDMA_IP is not set: run through tools/rdma-run\n");
    return 1;
  }
  check("evrdma_base_new", rbase != NULL);
  evrdma_base_set_polling_window(rbase, 20); /* the echo below polls 20 us before the loop sleeps */
  evrdma_base_set_polling_stretch(rbase, 5000); /* or longer, for an answer that came late */
  evrdma_base_set_turn_budget(rbase, 1000);  /* turns of at most about 1 ms of completions */
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &address.sin_addr);

  evrdma_stream_options_init(&options);
  check("the default message size is 64 KiB", options.max_message_size == 65536);
  options.max_message_size = 4096; /* 1000 short lines: many messages */
  listener = evrdma_listener_new_bind(rbase, on_accept, NULL, 0, 0, (struct sockaddr*)&address, sizeof address,
                                      &options);
  check("evrdma_listener_new_bind", listener != NULL);
  if (listener == NULL) return 1;
  address.sin_port = htons(evrdma_listener_get_port(listener));

  bev = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&address, sizeof address, &options);
  check("evrdma_bufferevent_connect", bev != NULL);
  check("it is an evrdma stream", evrdma_bufferevent_is_stream(bev) == 1);
  bufferevent_setcb(bev, client_read, NULL, client_event, &state);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  for (i = 0; i < kLines; ++i) evbuffer_add_printf(bufferevent_get_output(bev), "line %d\n", i);
  check("shutdown_write", evrdma_bufferevent_shutdown_write(bev) == 0);
  event_base_once(base, -1, EV_TIMEOUT, give_up, base, &limit);
  event_base_dispatch(base);
  check("connected", state.connected);
  check("every line came back, in order, then EOF", state.lines == kLines && state.bad == 0 && state.eof);
  if (state.lines != kLines || state.bad || !state.eof)
    printf("  %d lines, %d wrong, eof %d, error %s\n", state.lines, state.bad, state.eof, strerror(state.error));
  bufferevent_free(bev);

  /* Nobody listens there any more: the connect ends in BEV_EVENT_ERROR with ECONNREFUSED. */
  evrdma_listener_free(listener);
  memset(&state, 0, sizeof state);
  state.base = base;
  bev = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&address, sizeof address, NULL);
  check("connecting to a freed listener's port starts", bev != NULL);
  bufferevent_setcb(bev, NULL, NULL, client_event, &state);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  event_base_once(base, -1, EV_TIMEOUT, give_up, base, &limit);
  event_base_dispatch(base);
  check("refused: BEV_EVENT_ERROR with ECONNREFUSED", state.error == ECONNREFUSED);
  bufferevent_free(bev);

  errno = 0;
  check("a connect without an address fails with EINVAL",
        evrdma_bufferevent_connect(rbase, NULL, 0, NULL) == NULL && errno == EINVAL);
  check("shutdown_write on a stranger is -EINVAL", evrdma_bufferevent_shutdown_write(NULL) == -EINVAL);

  evrdma_base_free(rbase);
  event_base_free(base);

  address.sin_port = 0;
  serve_on_workers(address);
  printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
