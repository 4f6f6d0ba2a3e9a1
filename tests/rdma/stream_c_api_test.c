/* The C API as a C99 libevent program uses it, over real RDMA (run under tools/rdma-run): an
 * evrdma_listener whose streams echo every line, a client that writes 1000 lines, half-closes and
 * reads them back with evbuffer_readln until EOF, a refused connect's errno, bad arguments.
 *   stream_c_api_test   (EVRDMA_RDMA_IP names the address) */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
