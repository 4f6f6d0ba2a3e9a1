/* stream-exit-peer: the two ends of "a program writes and exits the usual way", as C libevent
 * programs over evrdma streams (tests/rdma/stream_exit_test.sh runs them under tools/rdma-run).
 *   stream-exit-peer sink ADDRESS STREAMS
 *       listens (port 0: it prints "listening on port N"), reads each accepted stream to its end,
 *       checking every byte against the writer's pattern, and prints one line per stream:
 *       "stream K: B bytes intact, EOF" or "stream K: B bytes intact, ERROR: REASON" (or
 *       "... bytes, CORRUPT at OFFSET"); exits once STREAMS streams ended (status 0).
 *   stream-exit-peer write ADDRESS PORT BYTES [--linger MS] [--free-after] [--write-callback]
 *       connects, writes BYTES of the pattern at once when connected, leaves its loop, then
 *       bufferevent_free; evrdma_base_free; event_base_free; with no loop turn in between, as most
 *       programs end (--linger: evrdma_base_set_linger first; --free-after: the bufferevent is
 *       freed after evrdma_base_free, not before; --write-callback: the bufferevent has a write
 *       callback, and asks for it (bufferevent_trigger) as it leaves its loop: a run of it is
 *       still due then). Exit status 0 once it wrote. */
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

/* The writer's byte at `offset`: a period of 251 (prime), so bytes lost or reordered in chunks of
 * any power-of-two size are seen. */
static unsigned char pattern(unsigned long long offset) { return (unsigned char)(offset % 251u); }

static int usage(FILE* out, const char* prog) {
  fprintf(out,
          "usage: %s sink ADDRESS STREAMS\n"
          "       %s write ADDRESS PORT BYTES [--linger MS] [--free-after] [--write-callback]\n"
          "The ends of a stream whose writer exits at once after bufferevent_free (see the source).\n",
          prog, prog);
  return out == stdout ? 0 : 2;
}

static int parse_address(const char* text, unsigned port, struct sockaddr_in* out) {
  memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons((unsigned short)port);
  return inet_pton(AF_INET, text, &out->sin_addr) == 1 ? 0 : -1;
}

/* ---- The sink. */

struct sink {
  struct event_base* base;
  int wanted, ended, next;
};

struct sunk {
  struct sink* sink;
  int number;
  unsigned long long bytes;
  long long corruptAt; /* -1: intact */
};

static void sink_read(struct bufferevent* bev, void* arg) {
  struct sunk* s = arg;
  struct evbuffer* input = bufferevent_get_input(bev);
  struct evbuffer_iovec pieces[16];
  int n, i;
  size_t k;
  while ((n = evbuffer_peek(input, -1, NULL, pieces, 16)) > 0) {
    size_t taken = 0;
    for (i = 0; i < n && i < 16; ++i) {
      const unsigned char* bytes = pieces[i].iov_base;
      for (k = 0; k < pieces[i].iov_len; ++k)
        if (s->corruptAt < 0 && bytes[k] != pattern(s->bytes + k)) s->corruptAt = (long long)(s->bytes + k);
      s->bytes += pieces[i].iov_len;
      taken += pieces[i].iov_len;
    }
    evbuffer_drain(input, taken);
  }
}

static void sink_event(struct bufferevent* bev, short what, void* arg) {
  struct sunk* s = arg;
  if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
  sink_read(bev, arg);
  if (s->corruptAt >= 0)
    printf("stream %d: %llu bytes, CORRUPT at %lld\n", s->number, s->bytes, s->corruptAt);
  else if (what & BEV_EVENT_EOF)
    printf("stream %d: %llu bytes intact, EOF\n", s->number, s->bytes);
  else
    printf("stream %d: %llu bytes intact, ERROR: %s\n", s->number, s->bytes,
           evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  fflush(stdout);
  bufferevent_free(bev);
  if (++s->sink->ended == s->sink->wanted) event_base_loopbreak(s->sink->base);
  free(s);
}

static void on_accept(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                      int socklen, void* arg) {
  struct sink* sink = arg;
  struct sunk* s = calloc(1, sizeof *s);
  (void)listener;
  (void)peer;
  (void)socklen;
  if (s == NULL) {
    bufferevent_free(bev);
    return;
  }
  s->sink = sink;
  s->number = ++sink->next;
  s->corruptAt = -1;
  bufferevent_setcb(bev, sink_read, NULL, sink_event, s);
  bufferevent_enable(bev, EV_READ);
}

static int run_sink(const char* address, int streams) {
  struct sink sink = {NULL, streams, 0, 0};
  struct sockaddr_in sin;
  struct evrdma_base* rbase;
  struct evrdma_listener* listener;
  if (parse_address(address, 0, &sin) != 0) return usage(stderr, "stream-exit-peer");
  sink.base = event_base_new();
  rbase = sink.base != NULL ? evrdma_base_new(sink.base) : NULL;
  listener = rbase != NULL ? evrdma_listener_new_bind(rbase, on_accept, &sink, 0, 0, (struct sockaddr*)&sin,
                                                      sizeof sin, NULL)
                           : NULL;
  if (listener == NULL) {
    fprintf(stderr, "sink: cannot listen on %s: %s\n", address, strerror(errno));
    return 1;
  }
  printf("listening on port %u\n", evrdma_listener_get_port(listener));
  fflush(stdout);
  event_base_dispatch(sink.base);
  evrdma_listener_free(listener);
  evrdma_base_free(rbase);
  event_base_free(sink.base);
  return 0;
}

/* ---- The writer. */

struct writer {
  struct event_base* base;
  unsigned long long bytes;
  int wrote;
  int triggerWrite;
};

static void writer_event(struct bufferevent* bev, short what, void* arg) {
  struct writer* w = arg;
  if (what & BEV_EVENT_CONNECTED) {
    unsigned char* all = malloc(w->bytes);
    unsigned long long i;
    if (all != NULL) {
      for (i = 0; i < w->bytes; ++i) all[i] = pattern(i);
      w->wrote = bufferevent_write(bev, all, w->bytes) == 0;
      free(all);
    }
  } else if (what & BEV_EVENT_ERROR) {
    fprintf(stderr, "writer: %s\n", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  }
  if (w->triggerWrite) bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS); /* run later: deferred */
  event_base_loopbreak(w->base); /* the program's work is done: it ends */
}

static void writer_drained(struct bufferevent* bev, void* arg) {
  (void)bev;
  (void)arg;
}

static int run_writer(const char* address, unsigned port, unsigned long long bytes, const char* linger,
                      int freeAfter, int writeCallback) {
  struct writer w = {NULL, bytes, 0, writeCallback};
  struct sockaddr_in sin;
  struct evrdma_base* rbase;
  struct bufferevent* bev;
  if (parse_address(address, port, &sin) != 0 || bytes == 0) return usage(stderr, "stream-exit-peer");
  w.base = event_base_new();
  rbase = w.base != NULL ? evrdma_base_new(w.base) : NULL;
  if (rbase == NULL) return 1;
  if (linger != NULL) evrdma_base_set_linger(rbase, (unsigned)strtoul(linger, NULL, 10));
  bev = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&sin, sizeof sin, NULL);
  if (bev == NULL) {
    fprintf(stderr, "writer: connect: %s\n", strerror(errno));
    return 1;
  }
  bufferevent_setcb(bev, NULL, writeCallback ? writer_drained : NULL, writer_event, &w);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  event_base_dispatch(w.base);
  /* How most programs end: no loop turn between these. */
  if (!freeAfter) bufferevent_free(bev);
  evrdma_base_free(rbase);
  if (freeAfter) bufferevent_free(bev);
  event_base_free(w.base);
  printf("writer: %s %llu bytes, then freed everything\n", w.wrote ? "wrote" : "could not write", bytes);
  return w.wrote ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) return usage(stdout, argv[0]);
  if (argc == 4 && strcmp(argv[1], "sink") == 0) return run_sink(argv[2], atoi(argv[3]));
  if (argc >= 5 && strcmp(argv[1], "write") == 0) {
    const char* linger = NULL;
    int freeAfter = 0, writeCallback = 0, i;
    for (i = 5; i < argc; ++i) {
      if (strcmp(argv[i], "--linger") == 0 && i + 1 < argc)
        linger = argv[++i];
      else if (strcmp(argv[i], "--free-after") == 0)
        freeAfter = 1;
      else if (strcmp(argv[i], "--write-callback") == 0)
        writeCallback = 1;
      else
        return usage(stderr, argv[0]);
    }
    return run_writer(argv[2], (unsigned)atoi(argv[3]), strtoull(argv[4], NULL, 10), linger, freeAfter, writeCallback);
  }
  return usage(stderr, argv[0]);
}
