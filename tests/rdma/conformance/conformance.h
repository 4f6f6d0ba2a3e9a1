/* The conformance suite's harness: a link (a client's end and the server's end of one
 * connection) over TCP or an evrdma stream, what each end sees, and a loop that runs until a
 * condition holds. Each case runs the same steps on both transports (see harness.c). */
#ifndef EVRDMA_TESTS_CONFORMANCE_H
#define EVRDMA_TESTS_CONFORMANCE_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stddef.h>

#include "evrdma/evrdma.h"

enum transport { TCP, RDMA };
extern const char* const transport_names[];

extern struct event_base* base;
extern struct evrdma_base* rbase;

/* Prints the check and counts it if it failed. */
void check(const char* what, enum transport t, int ok);
/* Waits until the machine has been up 6 s, for the cases with rate limits. libevent 2.1 reads
 * its cached time as the monotonic clock plus a difference to the wall clock that it first takes
 * once the monotonic clock passes 5 s: a token bucket last updated before then (a guest's first
 * seconds) sees time go back by decades after, and never refills (sockets' as well). */
void settle_libevent_clock(void);
/* Runs the loop until `done(arg)` or `seconds` have passed (that only bounds a hang). */
int run_until(int (*done)(void*), void* arg, int seconds);
/* The address a client of `t` connects to (the test bed's address, that listener's port). */
struct sockaddr_in listener_address(enum transport t);

struct link {
  enum transport transport;
  struct bufferevent *client, *server;
  int connected; /* the client heard BEV_EVENT_CONNECTED */
};

/* What an end sees: bytes read, callbacks counted. */
struct seen {
  struct evbuffer* bytes; /* what this end read, in order */
  int reads, writes, events;
  short event[8]; /* the first events, in order */
  int error[8];   /* EVUTIL_SOCKET_ERROR() with each of them */
  int keep;       /* the read callback leaves the input as it is */
  void (*on_read)(struct bufferevent*, struct seen*);  /* a case's step, once per read callback */
  void (*on_write)(struct bufferevent*, struct seen*); /* ... per write callback */
  void (*on_event)(struct bufferevent*, struct seen*, short); /* ... per event */
  size_t held_when_read;   /* the output's length the first time this end read */
  size_t most_found;       /* the most bytes one read callback found in the input */
  size_t most_left;        /* the most bytes the output held when the write callback ran */
  int freed;               /* a step freed this end */
};

/* Completes a link whose client end `client` a case started connecting to listener_address(t):
 * both ends exist and the client heard CONNECTED, or -1. */
int await_link(enum transport t, struct link* link, struct bufferevent* client);
/* Watches `bev` (callbacks set, reading and writing enabled). */
void watch(struct bufferevent* bev, struct seen* seen);
/* A case's start: a link over `t` with both ends watched; -1 (and a failed check) if it did not open. */
int begin(enum transport t, struct link* link, struct seen* client, struct seen* server);
/* A case's end: both ends freed (unless a step freed one), what they read with them. */
void finish(struct link* link, struct seen* client, struct seen* server);

struct wait_bytes {
  struct seen* seen;
  size_t at_least;
};
int has_bytes(void* arg);   /* struct wait_bytes: that end read at least that many bytes */
int has_written(void* arg); /* struct seen: its write callback ran */
int has_read(void* arg);    /* struct seen: its read callback ran */
int has_event(void* arg);   /* struct seen: its event callback ran */
struct wait_input {
  struct bufferevent* end;
  size_t at_least;
};
int input_has(void* arg); /* struct wait_input: that end's input holds at least that many bytes */

/* Deterministic bytes, different for each seed. */
void fill(unsigned char* data, size_t length, unsigned seed);
/* `seen` read exactly `length` bytes, equal to `data`. */
int read_exactly(struct seen* seen, const unsigned char* data, size_t length);

struct test_case {
  const char* name;
  void (*run)(enum transport);
};
#define CASE(f) {#f, f}
#define CASES_END {NULL, NULL}

extern const struct test_case bytes_cases[];   /* bytes.c: bytes, watermarks, timeouts */
extern const struct test_case ends_cases[];    /* ends.c: enable/disable, flush, free, EOF and errors */
extern const struct test_case options_cases[]; /* options.c: options and the features stacked on a bufferevent */
extern const struct test_case names_cases[];   /* names.c: connecting by host name */

#endif
