/* A libevent program must not tell an evrdma stream from a socket's bufferevent except by its
 * speed. Each case runs the same steps on a socket bufferevent (TCP over the test bed's netdev)
 * and on an evrdma stream (RDMA on the same address), and checks the same observable behaviour
 * on both: bytes and their order, which callbacks run and when. Where a stream must differ, its
 * case checks the difference docs/streams.md states (its table of features).
 *   bufferevent_conformance [part of a case's name]   (EVRDMA_RDMA_IP names the address) */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "conformance.h"

const char* const transport_names[] = {"tcp", "rdma"};
struct event_base* base;
struct evrdma_base* rbase;

static struct sockaddr_in address; /* the test bed's address */
static struct evconnlistener* tcp_listener;
static struct evrdma_listener* rdma_listener;
static struct bufferevent* accepted; /* the server's end of the link being opened */
static int failures;

void check(const char* what, enum transport t, int ok) {
  printf("%s: %s (%s)\n", ok ? "ok" : "FAILED", what, transport_names[t]);
  if (!ok) ++failures;
}

void settle_libevent_clock(void) {
  struct timespec now;
  while (clock_gettime(CLOCK_MONOTONIC, &now) == 0 && now.tv_sec < 6) {
    const struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

static int timed_out;
static void on_deadline(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  (void)arg;
  timed_out = 1;
}
int run_until(int (*done)(void*), void* arg, int seconds) {
  struct timeval limit = {seconds, 0};
  struct event* deadline = evtimer_new(base, on_deadline, NULL);
  timed_out = 0;
  evtimer_add(deadline, &limit);
  while (!done(arg) && !timed_out) event_base_loop(base, EVLOOP_ONCE);
  event_free(deadline);
  return done(arg);
}

/* ---- A link: a client's end and the server's end of one connection, over either transport. */

/* A server's end nobody claimed (its client went before the link was awaited, or a case left it):
 * the program's to free, as any accepted end. */
static void drop_unclaimed(void) {
  if (accepted != NULL) bufferevent_free(accepted);
  accepted = NULL;
}

static void on_tcp_accept(struct evconnlistener* listener, evutil_socket_t fd, struct sockaddr* peer, int socklen,
                          void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  drop_unclaimed();
  accepted = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
}

static void on_rdma_accept(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                           int socklen, void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  drop_unclaimed();
  accepted = bev;
}

static int listen_both(void) {
  tcp_listener = evconnlistener_new_bind(base, on_tcp_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 64,
                                         (struct sockaddr*)&address, sizeof address);
  rdma_listener = evrdma_listener_new_bind(rbase, on_rdma_accept, NULL, 0, 64, (struct sockaddr*)&address,
                                           sizeof address, NULL);
  return tcp_listener != NULL && rdma_listener != NULL ? 0 : -1;
}

struct sockaddr_in listener_address(enum transport t) {
  struct sockaddr_in to = address;
  if (t == TCP) {
    struct sockaddr_in bound;
    socklen_t length = sizeof bound;
    if (getsockname(evconnlistener_get_fd(tcp_listener), (struct sockaddr*)&bound, &length) == 0)
      to.sin_port = bound.sin_port;
  } else {
    to.sin_port = htons(evrdma_listener_get_port(rdma_listener));
  }
  return to;
}

static void on_client_connect(struct bufferevent* bev, short what, void* arg) {
  struct link* link = arg;
  (void)bev;
  if (what & BEV_EVENT_CONNECTED) link->connected = 1;
}

static int link_is_open(void* arg) {
  const struct link* link = arg;
  return link->connected && accepted != NULL;
}

int await_link(enum transport t, struct link* link, struct bufferevent* client) {
  memset(link, 0, sizeof *link);
  link->transport = t;
  link->client = client;
  drop_unclaimed();
  bufferevent_setcb(client, NULL, NULL, on_client_connect, link);
  bufferevent_enable(client, EV_READ | EV_WRITE);
  if (!run_until(link_is_open, link, 30)) return -1;
  link->server = accepted;
  accepted = NULL; /* claimed */
  return 0;
}

/* Opens a link over `t`: both ends exist, the client heard CONNECTED; no callbacks set on the server's end. */
static int open_link(enum transport t, struct link* link) {
  struct sockaddr_in to = listener_address(t);
  memset(link, 0, sizeof *link);
  link->transport = t;
  drop_unclaimed();
  if (t == TCP) {
    link->client = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(link->client, NULL, NULL, on_client_connect, link);
    if (bufferevent_socket_connect(link->client, (struct sockaddr*)&to, sizeof to) != 0) return -1;
  } else {
    link->client = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, NULL);
    if (link->client == NULL) return -1;
    bufferevent_setcb(link->client, NULL, NULL, on_client_connect, link);
  }
  bufferevent_enable(link->client, EV_READ | EV_WRITE);
  if (!run_until(link_is_open, link, 30)) return -1;
  link->server = accepted;
  accepted = NULL; /* claimed */
  return 0;
}

/* ---- What an end sees. */

static void seen_read(struct bufferevent* bev, void* arg) {
  struct seen* seen = arg;
  const size_t found = evbuffer_get_length(bufferevent_get_input(bev));
  if (found > seen->most_found) seen->most_found = found;
  if (seen->reads++ == 0) seen->held_when_read = evbuffer_get_length(bufferevent_get_output(bev));
  if (!seen->keep) evbuffer_add_buffer(seen->bytes, bufferevent_get_input(bev));
  if (seen->on_read != NULL) seen->on_read(bev, seen);
}
static void seen_write(struct bufferevent* bev, void* arg) {
  struct seen* seen = arg;
  const size_t left = evbuffer_get_length(bufferevent_get_output(bev));
  if (left > seen->most_left) seen->most_left = left;
  ++seen->writes;
  if (seen->on_write != NULL) seen->on_write(bev, seen);
}
static void seen_event(struct bufferevent* bev, short what, void* arg) {
  struct seen* seen = arg;
  if (seen->events < 8) {
    seen->event[seen->events] = what;
    seen->error[seen->events] = EVUTIL_SOCKET_ERROR();
  }
  ++seen->events;
  if (seen->on_event != NULL) seen->on_event(bev, seen, what);
}

void watch(struct bufferevent* bev, struct seen* seen) {
  memset(seen, 0, sizeof *seen);
  seen->bytes = evbuffer_new();
  bufferevent_setcb(bev, seen_read, seen_write, seen_event, seen);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

int begin(enum transport t, struct link* link, struct seen* client, struct seen* server) {
  if (open_link(t, link) != 0) {
    check("the link opens", t, 0);
    return -1;
  }
  watch(link->client, client);
  watch(link->server, server);
  return 0;
}

void finish(struct link* link, struct seen* client, struct seen* server) {
  if (!client->freed) bufferevent_free(link->client);
  if (!server->freed) bufferevent_free(link->server);
  evbuffer_free(client->bytes);
  evbuffer_free(server->bytes);
}

int has_bytes(void* arg) {
  const struct wait_bytes* wait = arg;
  return evbuffer_get_length(wait->seen->bytes) >= wait->at_least;
}
int has_written(void* arg) { return ((const struct seen*)arg)->writes > 0; }
int has_read(void* arg) { return ((const struct seen*)arg)->reads > 0; }
int has_event(void* arg) { return ((const struct seen*)arg)->events > 0; }
int input_has(void* arg) {
  const struct wait_input* wait = arg;
  return evbuffer_get_length(bufferevent_get_input(wait->end)) >= wait->at_least;
}

void fill(unsigned char* data, size_t length, unsigned seed) {
  size_t i;
  for (i = 0; i < length; ++i) data[i] = (unsigned char)((i * 131 + seed * 7) >> 3);
}

int read_exactly(struct seen* seen, const unsigned char* data, size_t length) {
  return evbuffer_get_length(seen->bytes) == length &&
         (length == 0 || memcmp(evbuffer_pullup(seen->bytes, -1), data, length) == 0);
}

/* ---- Running the cases. */

static const struct test_case* const groups[] = {bytes_cases, ends_cases, options_cases, names_cases};

int run_peer(int argc, char** argv); /* ends.c: the peer a case starts as a process of its own */

int main(int argc, char** argv) {
  const char* ip = getenv("EVRDMA_RDMA_IP");
  const char* only = argc > 1 ? argv[1] : NULL;
  const struct test_case* c;
  size_t g;
  int t, ran = 0;
  if (only != NULL && (strcmp(only, "-h") == 0 || strcmp(only, "--help") == 0)) {
    printf("usage: %s [part of a case's name]\n  runs each case on TCP and on an evrdma stream at EVRDMA_RDMA_IP\n",
           argv[0]);
    return 0;
  }
  if (only != NULL && strcmp(only, "--peer") == 0) return run_peer(argc - 2, argv + 2);
  if (ip == NULL) {
    fprintf(stderr, "EVRDMA_RDMA_IP is not set: run under tools/rdma-run\n");
    return 2;
  }
  address.sin_family = AF_INET;
  if (inet_pton(AF_INET, ip, &address.sin_addr) != 1) {
    fprintf(stderr, "EVRDMA_RDMA_IP=%s is not an IPv4 address\n", ip);
    return 2;
  }
  base = event_base_new();
  rbase = base != NULL ? evrdma_base_new(base) : NULL;
  if (rbase == NULL || listen_both() != 0) {
    fprintf(stderr, "cannot listen on %s: %s\n", ip, strerror(errno));
    return 2;
  }
  for (g = 0; g < sizeof groups / sizeof groups[0]; ++g) {
    for (c = groups[g]; c->name != NULL; ++c) {
      if (only != NULL && strstr(c->name, only) == NULL) continue;
      printf("-- %s\n", c->name);
      fflush(stdout);
      for (t = TCP; t <= RDMA; ++t) c->run((enum transport)t);
      ++ran;
    }
  }
  evconnlistener_free(tcp_listener);
  evrdma_listener_free(rdma_listener);
  drop_unclaimed();
  evrdma_base_free(rbase);
  /* One turn for the finalizers of what was freed since the loop last ran (streams accepted for
   * clients that went at once among them), as docs/streams.md asks ("Exiting"). */
  event_base_loop(base, EVLOOP_NONBLOCK);
  event_base_free(base);
  if (ran == 0) {
    fprintf(stderr, "no case is named like %s\n", only);
    return 2;
  }
  printf("%d case(s) on both transports, %d check(s) failed\n", ran, failures);
  return failures == 0 ? 0 : 1;
}
