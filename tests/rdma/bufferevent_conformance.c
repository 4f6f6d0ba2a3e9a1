/* A libevent program must not tell an evrdma stream from a socket's bufferevent except by its
 * speed. Each case here runs the same steps on a socket bufferevent (TCP over the test bed's
 * netdev) and on an evrdma stream (RDMA on the same address), and checks the same observable
 * behaviour on both: bytes and their order, which callbacks run and when. Where a stream must
 * differ, its case checks the difference docs/streams.md states (its table of features).
 *   bufferevent_conformance [part of a case's name]   (EVRDMA_RDMA_IP names the address) */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "evrdma/evrdma.h"

enum transport { TCP, RDMA };
static const char* const transport_names[] = {"tcp", "rdma"};

static struct event_base* base;
static struct evrdma_base* rbase;
static struct sockaddr_in address; /* the test bed's address; each listener's port */
static struct evconnlistener* tcp_listener;
static struct evrdma_listener* rdma_listener;
static struct bufferevent* accepted; /* the server's end of the link being opened */
static int failures;

static void check(const char* what, enum transport t, int ok) {
  printf("%s: %s (%s)\n", ok ? "ok" : "FAILED", what, transport_names[t]);
  if (!ok) ++failures;
}

/* Runs the loop until `done(arg)` or `seconds` have passed (that only bounds a hang). */
static int timed_out;
static void on_deadline(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  (void)arg;
  timed_out = 1;
}
static int run_until(int (*done)(void*), void* arg, int seconds) {
  struct timeval limit = {seconds, 0};
  struct event* deadline = evtimer_new(base, on_deadline, NULL);
  timed_out = 0;
  evtimer_add(deadline, &limit);
  while (!done(arg) && !timed_out) event_base_loop(base, EVLOOP_ONCE);
  event_free(deadline);
  return done(arg);
}

/* ---- A link: a client's end and the server's end of one connection, over either transport. */

static void on_tcp_accept(struct evconnlistener* listener, evutil_socket_t fd, struct sockaddr* peer, int socklen,
                          void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  accepted = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
}

static void on_rdma_accept(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                           int socklen, void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  accepted = bev;
}

static int listen_both(void) {
  tcp_listener = evconnlistener_new_bind(base, on_tcp_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 64,
                                         (struct sockaddr*)&address, sizeof address);
  rdma_listener = evrdma_listener_new_bind(rbase, on_rdma_accept, NULL, 0, 64, (struct sockaddr*)&address,
                                           sizeof address, NULL);
  return tcp_listener != NULL && rdma_listener != NULL ? 0 : -1;
}

struct link {
  enum transport transport;
  struct bufferevent *client, *server;
  int connected; /* the client heard BEV_EVENT_CONNECTED */
};

static void on_client_connect(struct bufferevent* bev, short what, void* arg) {
  struct link* link = arg;
  (void)bev;
  if (what & BEV_EVENT_CONNECTED) link->connected = 1;
}

static int link_is_open(void* arg) {
  const struct link* link = arg;
  return link->connected && accepted != NULL;
}

/* Opens a link over `t`: both ends exist, the client heard CONNECTED; no callbacks set on the server's end. */
static int open_link(enum transport t, struct link* link) {
  struct sockaddr_in to = address;
  memset(link, 0, sizeof *link);
  link->transport = t;
  accepted = NULL;
  if (t == TCP) {
    struct sockaddr_in bound;
    socklen_t length = sizeof bound;
    if (getsockname(evconnlistener_get_fd(tcp_listener), (struct sockaddr*)&bound, &length) != 0) return -1;
    to.sin_port = bound.sin_port;
    link->client = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(link->client, NULL, NULL, on_client_connect, link);
    if (bufferevent_socket_connect(link->client, (struct sockaddr*)&to, sizeof to) != 0) return -1;
  } else {
    to.sin_port = htons(evrdma_listener_get_port(rdma_listener));
    link->client = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, NULL);
    if (link->client == NULL) return -1;
    bufferevent_setcb(link->client, NULL, NULL, on_client_connect, link);
  }
  bufferevent_enable(link->client, EV_READ | EV_WRITE);
  if (!run_until(link_is_open, link, 30)) return -1;
  link->server = accepted;
  return 0;
}

/* ---- What a case sees: bytes read on each end, callbacks counted. */

struct seen {
  struct evbuffer* bytes; /* what this end read, in order */
  int reads, writes, events;
  short event[8]; /* the first events, in order */
  int keep; /* the read callback leaves the input as it is */
  void (*on_read)(struct bufferevent*, struct seen*); /* a case's step, once per read callback */
  size_t held_when_read; /* the output's length the first time this end read */
  size_t most_found; /* the most bytes one read callback found in the input */
};

static void seen_read(struct bufferevent* bev, void* arg) {
  struct seen* seen = arg;
  const size_t found = evbuffer_get_length(bufferevent_get_input(bev));
  if (found > seen->most_found) seen->most_found = found;
  if (seen->reads++ == 0) seen->held_when_read = evbuffer_get_length(bufferevent_get_output(bev));
  if (!seen->keep) evbuffer_add_buffer(seen->bytes, bufferevent_get_input(bev));
  if (seen->on_read != NULL) seen->on_read(bev, seen);
}
static void seen_write(struct bufferevent* bev, void* arg) {
  (void)bev;
  ++((struct seen*)arg)->writes;
}
static void seen_event(struct bufferevent* bev, short what, void* arg) {
  struct seen* seen = arg;
  (void)bev;
  if (seen->events < 8) seen->event[seen->events] = what;
  ++seen->events;
}

static void watch(struct bufferevent* bev, struct seen* seen) {
  memset(seen, 0, sizeof *seen);
  seen->bytes = evbuffer_new();
  bufferevent_setcb(bev, seen_read, seen_write, seen_event, seen);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* A case's start: a link over `t` with both ends watched; -1 (and a failed check) if it did not open. */
static int begin(enum transport t, struct link* link, struct seen* client, struct seen* server) {
  if (open_link(t, link) != 0) {
    check("the link opens", t, 0);
    return -1;
  }
  watch(link->client, client);
  watch(link->server, server);
  return 0;
}

/* A case's end: both ends freed (the server's unless the case freed it), what they read with them. */
static void finish(struct link* link, struct seen* client, struct seen* server, int server_freed) {
  bufferevent_free(link->client);
  if (!server_freed) bufferevent_free(link->server);
  evbuffer_free(client->bytes);
  evbuffer_free(server->bytes);
}

struct wait_bytes {
  struct seen* seen;
  size_t at_least;
};
static int has_bytes(void* arg) {
  const struct wait_bytes* wait = arg;
  return evbuffer_get_length(wait->seen->bytes) >= wait->at_least;
}
static int has_written(void* arg) { return ((const struct seen*)arg)->writes > 0; }

static void fill(unsigned char* data, size_t length, unsigned seed) {
  size_t i;
  for (i = 0; i < length; ++i) data[i] = (unsigned char)((i * 131 + seed * 7) >> 3);
}

/* ---- The cases. Each runs on one transport; main runs it on both. */

static void enable_writing(struct bufferevent* bev, struct seen* seen) {
  (void)seen;
  bufferevent_enable(bev, EV_WRITE); /* nothing written, nothing flushed */
}

/* Written while writing is disabled, the bytes wait in the output evbuffer (a loop pass that
 * reads meanwhile sends none of them); writing enabled again from a callback, with no write and
 * no flush after it, they all go, and the write callback follows. */
static void bytes_written_while_writing_is_disabled_leave_once_it_is_enabled_again(enum transport t) {
  enum { kBytes = 1000 };
  unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes one = {&client, 1}, all = {&server, kBytes};
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 1);
  bufferevent_disable(link.client, EV_WRITE);
  bufferevent_write(link.client, data, kBytes);
  client.on_read = enable_writing;
  bufferevent_write(link.server, "x", 1);  /* a pass of the client's loop that reads */
  check("the client reads while its writing is disabled", t, run_until(has_bytes, &one, 30));
  check("the bytes written meanwhile are still in its output when it reads", t, client.held_when_read == kBytes);
  check("once writing is enabled again, every byte reaches the server", t, run_until(has_bytes, &all, 30));
  check("intact and in order", t,
        evbuffer_get_length(server.bytes) == kBytes && memcmp(evbuffer_pullup(server.bytes, -1), data, kBytes) == 0);
  check("and the client's write callback runs", t, run_until(has_written, &client, 30));
  finish(&link, &client, &server, 0);
}

static void echo(struct bufferevent* bev, struct seen* seen) {
  (void)seen;
  bufferevent_write_buffer(bev, seen->bytes);
}

/* Writes of many sizes one way come back echoed: every byte, in order. */
static void bytes_go_both_ways_intact_and_in_order(enum transport t) {
  enum { kBytes = 200000 };
  static unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&client, kBytes};
  size_t at = 0, step = 1;
  if (begin(t, &link, &client, &server) != 0) return;
  server.on_read = echo;
  fill(data, kBytes, 2);
  while (at < kBytes) {
    size_t length = step < kBytes - at ? step : kBytes - at;
    bufferevent_write(link.client, data + at, length);
    at += length;
    step = step * 3 % 40009 + 1;
  }
  check("every byte comes back", t, run_until(has_bytes, &all, 60));
  check("intact and in order", t,
        evbuffer_get_length(client.bytes) == kBytes && memcmp(evbuffer_pullup(client.bytes, -1), data, kBytes) == 0);
  finish(&link, &client, &server, 0);
}

static int has_event(void* arg) { return ((const struct seen*)arg)->events > 0; }

/* A write timeout runs out only while written bytes wait to be written: bytes that went out
 * start no timeout (a read timeout later than it is the first event), and bytes the peer does
 * not take time out (BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING). */
static void a_write_timeout_runs_out_only_while_written_bytes_wait(enum transport t) {
  enum { kBytes = 1000 };
  static const size_t kStuck = 32u << 20; /* past what TCP's buffers and a stream's windows hold */
  unsigned char data[kBytes];
  unsigned char* stuck;
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, kBytes};
  const struct timeval read_timeout = {0, 600000}, write_timeout = {0, 150000}, stuck_timeout = {0, 500000};
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 3);
  bufferevent_set_timeouts(link.client, &read_timeout, &write_timeout);
  bufferevent_write(link.client, data, kBytes);
  check("the bytes reach the server", t, run_until(has_bytes, &all, 30));
  check("the client's first event is its read timeout", t, run_until(has_event, &client, 30));
  check("a read timeout, no write timeout, though the write timeout is the shorter", t,
        client.events >= 1 && client.event[0] == (BEV_EVENT_TIMEOUT | BEV_EVENT_READING));

  /* The server stops reading: the client's bytes wait, and its write timeout runs out. */
  bufferevent_disable(link.server, EV_READ);
  client.events = 0;
  bufferevent_set_timeouts(link.client, NULL, &stuck_timeout);
  bufferevent_enable(link.client, EV_READ | EV_WRITE);
  stuck = malloc(kStuck);
  if (stuck != NULL) {
    memset(stuck, 7, kStuck);
    bufferevent_write(link.client, stuck, kStuck);
    free(stuck);
  }
  check("with the server not reading, the client's write timeout runs out", t,
        run_until(has_event, &client, 60) && client.event[0] == (BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING));
  finish(&link, &client, &server, 0);
}

struct wait_input {
  struct bufferevent* end;
  size_t at_least;
};
static int input_has(void* arg) {
  const struct wait_input* wait = arg;
  return evbuffer_get_length(bufferevent_get_input(wait->end)) >= wait->at_least;
}
static int has_read(void* arg) { return ((const struct seen*)arg)->reads > 0; }

/* The read low watermark holds the read callback back until that many bytes are in: 60 of 100
 * arrive without a call, the next 40 make one, with all 100. */
static void the_read_low_watermark_holds_the_read_callback_until_enough_arrived(enum transport t) {
  unsigned char data[100];
  struct link link;
  struct seen client, server;
  struct wait_input sixty;
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, sizeof data, 4);
  bufferevent_setwatermark(link.server, EV_READ, 100, 0);
  sixty.end = link.server;
  sixty.at_least = 60;
  bufferevent_write(link.client, data, 60);
  check("60 bytes reach the server's input", t, run_until(input_has, &sixty, 30));
  check("with no read callback (below the low watermark)", t, server.reads == 0);
  bufferevent_write(link.client, data + 60, 40);
  check("40 more make one read callback", t, run_until(has_read, &server, 30) && server.reads == 1);
  check("which reads all 100, intact", t,
        evbuffer_get_length(server.bytes) == 100 && memcmp(evbuffer_pullup(server.bytes, -1), data, 100) == 0);
  finish(&link, &client, &server, 0);
}

/* The read high watermark bounds the input: 5000 bytes written at once reach a reader with a
 * high watermark of 1000 at most 1000 at a time, each read callback finding no more, all of them
 * intact. (A callback that leaves the input at the watermark is not a case: libevent 2.1.12's
 * socket bufferevent then calls it again on every loop pass, libevent issue #891; see
 * docs/streams.md.) */
static void the_read_high_watermark_bounds_what_each_read_callback_finds(enum transport t) {
  enum { kBytes = 5000, kHigh = 1000 };
  unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, kBytes};
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 5);
  bufferevent_setwatermark(link.server, EV_READ, 0, kHigh);
  bufferevent_write(link.client, data, kBytes);
  check("every byte reaches the server", t, run_until(has_bytes, &all, 30));
  check("intact and in order", t,
        evbuffer_get_length(server.bytes) == kBytes && memcmp(evbuffer_pullup(server.bytes, -1), data, kBytes) == 0);
  check("no read callback found more than the high watermark", t, server.most_found == kHigh);
  check("so it took at least five", t, server.reads >= kBytes / kHigh);
  finish(&link, &client, &server, 0);
}

static void free_on_read(struct bufferevent* bev, struct seen* seen) {
  (void)seen;
  bufferevent_free(bev);
}

/* An end freed from inside its own read callback, having read everything: the peer reads EOF
 * (BEV_EVENT_EOF | BEV_EVENT_READING), and nothing of the freed end runs again. */
static void an_end_freed_in_its_read_callback_gives_the_peer_eof(enum transport t) {
  struct link link;
  struct seen client, server;
  if (begin(t, &link, &client, &server) != 0) return;
  server.on_read = free_on_read;
  bufferevent_write(link.client, "0123456789", 10);
  check("the client hears an event", t, run_until(has_event, &client, 30));
  check("EOF while reading", t, client.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING));
  check("the server read once and heard nothing after", t, server.reads == 1 && server.events == 0 &&
                                                             evbuffer_get_length(server.bytes) == 10);
  finish(&link, &client, &server, 1);
}

struct test_case {
  const char* name;
  void (*run)(enum transport);
};
#define CASE(f) {#f, f}
static const struct test_case cases[] = {
    CASE(bytes_go_both_ways_intact_and_in_order),
    CASE(bytes_written_while_writing_is_disabled_leave_once_it_is_enabled_again),
    CASE(a_write_timeout_runs_out_only_while_written_bytes_wait),
    CASE(the_read_low_watermark_holds_the_read_callback_until_enough_arrived),
    CASE(an_end_freed_in_its_read_callback_gives_the_peer_eof),
    CASE(the_read_high_watermark_bounds_what_each_read_callback_finds),
};

int main(int argc, char** argv) {
  const char* ip = getenv("EVRDMA_RDMA_IP");
  const char* only = argc > 1 ? argv[1] : NULL;
  size_t i;
  int t, ran = 0;
  if (only != NULL && (strcmp(only, "-h") == 0 || strcmp(only, "--help") == 0)) {
    printf("usage: %s [part of a case's name]\n  runs each case on TCP and on an evrdma stream at EVRDMA_RDMA_IP\n",
           argv[0]);
    return 0;
  }
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
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (only != NULL && strstr(cases[i].name, only) == NULL) continue;
    printf("-- %s\n", cases[i].name);
    for (t = TCP; t <= RDMA; ++t) cases[i].run((enum transport)t);
    ++ran;
  }
  evconnlistener_free(tcp_listener);
  evrdma_listener_free(rdma_listener);
  evrdma_base_free(rbase);
  event_base_free(base);
  if (ran == 0) {
    fprintf(stderr, "no case is named like %s\n", only);
    return 2;
  }
  printf("%d case(s) on both transports, %d check(s) failed\n", ran, failures);
  return failures == 0 ? 0 : 1;
}
