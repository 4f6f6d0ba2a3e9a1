/* evrdma-proxy: a gateway that forwards each connection it takes to a target, TCP to RDMA or RDMA to
 * TCP (or either to either), so that a pair of them puts a TCP client and a TCP server on RDMA
 * unchanged:  client --tcp--> proxy --rdma--> proxy --tcp--> server.
 * One libevent loop serves every connection, each a pair of bufferevents (a socket's, or an evrdma
 * stream's: the same calls) whose bytes are moved both ways as they come:
 *   back-pressure: once what waits for one side reaches --window bytes, the other side is read no
 *     more until half of it has gone, so a slow end never grows the proxy past its windows and a
 *     read or two (256 KiB each; the fast end is slowed by its own transport's flow control: TCP's
 *     window, the stream's credits);
 *   half-close: a side's EOF is passed on as a half-close of the other (shutdown(SHUT_WR) once its
 *     bytes have gone, evrdma_bufferevent_shutdown_write on a stream) and the other way still
 *     flows; a connection ends once both ways have ended, or at once on an error of either side;
 *   figures: on SIGUSR1 and at exit (SIGINT, SIGTERM), one line of counts and the largest
 *     backlog any side had.
 *
 *   usage: evrdma-proxy --from (tcp|rdma) ADDRESS PORT --to (tcp|rdma) ADDRESS PORT [--window BYTES]
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"
#include "evrdma/evrdma.h"

enum { kDefaultWindow = 1 << 20, kLargestRead = 256 << 10 };

struct endpoint {
  int rdma;
  const char *host;
  struct sockaddr_storage address;
  int length;
};

struct figures {
  unsigned long long accepted, active, ended, target_failed, forwarded, returned;
  size_t largest_backlog; /* the most bytes that ever waited in one side's output */
};

struct link;

struct proxy {
  struct event_base *base;
  struct link *links; /* the connections being forwarded, freed at exit if still there */
  struct evrdma_base *rbase; /* if either side is RDMA */
  struct endpoint target;
  size_t window;
  struct figures figures;
};

/* One side of a forwarded connection: [0] the one taken, [1] the one to the target. */
struct side {
  struct bufferevent *bev;
  int rdma;
  int ended;  /* its EOF came: nothing more will be read from it */
  int closed; /* its write half is closed (the other side's EOF passed on) */
  int held;   /* not read from while the other side's output is full */
};

struct link {
  struct proxy *proxy;
  struct link *previous, *next;
  struct side sides[2];
  int target_up;
};

static int index_of(const struct link *link, const struct bufferevent *bev) { return link->sides[0].bev == bev ? 0 : 1; }

static void link_free(struct link *link) {
  for (int i = 0; i < 2; ++i)
    if (link->sides[i].bev != NULL) bufferevent_free(link->sides[i].bev);
  if (link->previous != NULL) link->previous->next = link->next;
  else link->proxy->links = link->next;
  if (link->next != NULL) link->next->previous = link->previous;
  link->proxy->figures.active--;
  link->proxy->figures.ended++;
  free(link);
}

/* Both ways have ended: every byte read was passed on and both write halves are closed. */
static int link_done(const struct link *link) {
  return link->sides[0].ended && link->sides[1].ended && link->sides[0].closed && link->sides[1].closed;
}

/* Closes side `to`'s write half once what waits in its output has gone (a stream takes the
 * half-close at once and sends it after the bytes). */
static void close_write_half(struct link *link, int to) {
  struct side *side = &link->sides[to];
  if (side->closed || (to == 1 && !link->target_up)) return; /* the connect's end passes it on */
  if (side->rdma) {
    evrdma_bufferevent_shutdown_write(side->bev);
    side->closed = 1;
  } else if (evbuffer_get_length(bufferevent_get_output(side->bev)) == 0) {
    shutdown(bufferevent_getfd(side->bev), SHUT_WR);
    side->closed = 1;
  } else {
    bufferevent_setwatermark(side->bev, EV_WRITE, 0, 0); /* the write callback once all has gone */
  }
}

/* Moves what side `from` read into the other side's output; holds `from` once that is full. */
static void forward(struct link *link, int from) {
  struct side *source = &link->sides[from], *sink = &link->sides[1 - from];
  struct evbuffer *in = bufferevent_get_input(source->bev), *out = bufferevent_get_output(sink->bev);
  const size_t bytes = evbuffer_get_length(in);
  if (bytes == 0) return;
  evbuffer_add_buffer(out, in);
  struct figures *figures = &link->proxy->figures;
  if (from == 0) figures->forwarded += bytes;
  else figures->returned += bytes;
  const size_t backlog = evbuffer_get_length(out);
  if (backlog > figures->largest_backlog) figures->largest_backlog = backlog;
  if (backlog >= link->proxy->window && !source->held) {
    source->held = 1;
    bufferevent_disable(source->bev, EV_READ);
  }
}

static void on_read(struct bufferevent *bev, void *arg) {
  struct link *link = arg;
  const int from = index_of(link, bev);
  /* A read callback may still come once reading is disabled (one already due, or a filter's
   * bufferevent refilling its input as it was drained): what it found waits until the resume. */
  if (!link->sides[from].held) forward(link, from);
}

/* The output of side `to` drained to its low watermark: the other side is read again, and a
 * half-close waiting for the bytes to go goes. */
static void on_write(struct bufferevent *bev, void *arg) {
  struct link *link = arg;
  const int to = index_of(link, bev);
  struct side *source = &link->sides[1 - to];
  if (source->held && evbuffer_get_length(bufferevent_get_output(bev)) <= link->proxy->window / 2) {
    source->held = 0;
    bufferevent_enable(source->bev, EV_READ);
    forward(link, 1 - to); /* what it read meanwhile: no callback comes for it */
  }
  if (source->ended) close_write_half(link, to);
  if (link_done(link)) link_free(link);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
  struct link *link = arg;
  const int at = index_of(link, bev);
  if (what & BEV_EVENT_CONNECTED) {
    link->target_up = 1;
    if (link->sides[0].ended) close_write_half(link, 1);
    if (link_done(link)) link_free(link);
    return;
  }
  if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
    forward(link, at);
    link->sides[at].ended = 1;
    close_write_half(link, 1 - at);
    if (link_done(link)) link_free(link);
    return;
  }
  if (at == 1 && !link->target_up) {
    link->proxy->figures.target_failed++;
    fprintf(stderr, "evrdma-proxy: connect to %s over %s: %s\n", link->proxy->target.host,
            link->proxy->target.rdma ? "rdma" : "tcp", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  }
  link_free(link); /* an error or a timeout on either side ends both */
}

static struct bufferevent *connect_target(struct proxy *proxy) {
  struct endpoint *target = &proxy->target;
  if (target->rdma)
    return evrdma_bufferevent_connect(proxy->rbase, (struct sockaddr *)&target->address, target->length, NULL);
  struct bufferevent *bev = bufferevent_socket_new(proxy->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
  if (bev != NULL && bufferevent_socket_connect(bev, (struct sockaddr *)&target->address, target->length) != 0) {
    bufferevent_free(bev);
    return NULL;
  }
  return bev;
}

/* A connection taken: its link to the target starts; both sides are read at once (what comes
 * before the target is up waits in the target's output). */
static void take(struct proxy *proxy, struct bufferevent *taken, int rdma) {
  proxy->figures.accepted++;
  struct link *link = calloc(1, sizeof *link);
  struct bufferevent *target = link != NULL && taken != NULL ? connect_target(proxy) : NULL;
  if (target == NULL) {
    fprintf(stderr, "evrdma-proxy: no connection to %s: %s\n", proxy->target.host, strerror(errno));
    proxy->figures.target_failed++;
    if (taken != NULL) bufferevent_free(taken);
    free(link);
    return;
  }
  proxy->figures.active++;
  link->proxy = proxy;
  link->next = proxy->links;
  if (link->next != NULL) link->next->previous = link;
  proxy->links = link;
  link->sides[0] = (struct side){.bev = taken, .rdma = rdma};
  link->sides[1] = (struct side){.bev = target, .rdma = proxy->target.rdma};
  for (int i = 0; i < 2; ++i) {
    bufferevent_setcb(link->sides[i].bev, on_read, on_write, on_event, link);
    bufferevent_setwatermark(link->sides[i].bev, EV_WRITE, proxy->window / 2, 0);
    bufferevent_setwatermark(link->sides[i].bev, EV_READ, 0, kLargestRead);
    bufferevent_enable(link->sides[i].bev, EV_READ | EV_WRITE);
  }
}

static void on_tcp_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *peer, int socklen,
                          void *arg) {
  (void)listener, (void)peer, (void)socklen;
  struct proxy *proxy = arg;
  take(proxy, bufferevent_socket_new(proxy->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS), 0);
}

static void on_rdma_accept(struct evrdma_listener *listener, struct bufferevent *bev, const struct sockaddr *peer,
                           int socklen, void *arg) {
  (void)listener, (void)peer, (void)socklen;
  take(arg, bev, 1);
}

static void print_figures(const struct proxy *proxy, const char *when) {
  const struct figures *f = &proxy->figures;
  printf("evrdma-proxy: %s: accepted=%llu active=%llu ended=%llu target_failed=%llu forwarded_bytes=%llu "
         "returned_bytes=%llu largest_backlog=%zu window=%zu\n",
         when, f->accepted, f->active, f->ended, f->target_failed, f->forwarded, f->returned, f->largest_backlog,
         proxy->window);
  fflush(stdout);
}

static void on_figures(evutil_socket_t signal, short what, void *arg) {
  (void)signal, (void)what;
  print_figures(arg, "figures");
}

static void on_stop(evutil_socket_t signal, short what, void *arg) {
  (void)signal, (void)what;
  event_base_loopexit(((struct proxy *)arg)->base, NULL);
}

static int usage(const char *program, FILE *to, int status) {
  fprintf(to,
          "usage: %s --from (tcp|rdma) ADDRESS PORT --to (tcp|rdma) ADDRESS PORT [--window BYTES]\n"
          "  Takes connections at ADDRESS PORT (--from; PORT 0: any free one, printed) and forwards\n"
          "  each, both ways, to a connection of its own to --to: TCP to RDMA, RDMA to TCP, or either\n"
          "  to either. Two of them put a TCP client and server on RDMA unchanged:\n"
          "    evrdma-proxy --from tcp 127.0.0.1 8080 --to rdma 192.0.2.1 9080   (client's host)\n"
          "    evrdma-proxy --from rdma 192.0.2.1 9080 --to tcp 127.0.0.1 80     (server's host)\n"
          "  --window: the bytes that may wait for one side before the other is read no more\n"
          "  (default %d). A side's EOF is passed on as a half-close. Figures on SIGUSR1 and at\n"
          "  exit (SIGINT, SIGTERM): connections, bytes each way, the largest backlog.\n",
          program, (int)kDefaultWindow);
  return status;
}

/* Reads "--from|--to (tcp|rdma) ADDRESS PORT" at argv[i]; 0, or the exit status. */
static int parse_endpoint(char **argv, int argc, int i, struct endpoint *endpoint) {
  if (i + 3 >= argc || (strcmp(argv[i + 1], "tcp") != 0 && strcmp(argv[i + 1], "rdma") != 0))
    return usage(argv[0], stderr, 2);
  endpoint->rdma = strcmp(argv[i + 1], "rdma") == 0;
  endpoint->host = argv[i + 2];
  const int parsed = address_parse(argv[i + 2], argv[i + 3], &endpoint->address, &endpoint->length);
  if (parsed != 0) {
    fprintf(stderr, "evrdma-proxy: %s port %s: %s\n", argv[i + 2], argv[i + 3], address_error(parsed));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct endpoint from = {.length = 0};
  struct proxy proxy = {.window = kDefaultWindow};
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(argv[0], stdout, 0);
  }
  for (int i = 1; i < argc; ++i) {
    int status = 0;
    if (strcmp(argv[i], "--from") == 0 || strcmp(argv[i], "--to") == 0) {
      status = parse_endpoint(argv, argc, i, strcmp(argv[i], "--from") == 0 ? &from : &proxy.target);
      i += 3;
    } else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
      char *end = NULL;
      const unsigned long long window = strtoull(argv[++i], &end, 10);
      if (*end != '\0' || window < 2 || window > (1ull << 40)) status = usage(argv[0], stderr, 2);
      proxy.window = (size_t)window;
    } else {
      status = usage(argv[0], stderr, 2);
    }
    if (status != 0) return status;
  }
  if (from.length == 0 || proxy.target.length == 0) return usage(argv[0], stderr, 2);
  signal(SIGPIPE, SIG_IGN);
  proxy.base = event_base_new();
  if (proxy.base != NULL && (from.rdma || proxy.target.rdma)) proxy.rbase = evrdma_base_new(proxy.base);
  if (proxy.base == NULL || ((from.rdma || proxy.target.rdma) && proxy.rbase == NULL)) {
    fprintf(stderr, "evrdma-proxy: no event_base or evrdma_base: %s\n", strerror(errno));
    return 1;
  }
  struct evconnlistener *tcp = NULL;
  struct evrdma_listener *rdma = NULL;
  if (from.rdma)
    rdma = evrdma_listener_new_bind(proxy.rbase, on_rdma_accept, &proxy, LEV_OPT_REUSEABLE, -1,
                                    (struct sockaddr *)&from.address, from.length, NULL);
  else
    tcp = evconnlistener_new_bind(proxy.base, on_tcp_accept, &proxy, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
                                  (struct sockaddr *)&from.address, from.length);
  if (tcp == NULL && rdma == NULL) {
    fprintf(stderr, "evrdma-proxy: listen on %s over %s: %s\n", from.host, from.rdma ? "rdma" : "tcp", strerror(errno));
    if (proxy.rbase != NULL) evrdma_base_free(proxy.rbase);
    event_base_free(proxy.base);
    return 1;
  }
  const unsigned port = tcp != NULL ? tcp_listener_port(tcp) : evrdma_listener_get_port(rdma);
  printf("evrdma-proxy: listening on %s %s port %u, forwarding to %s %s port %u\n", from.host,
         from.rdma ? "rdma" : "tcp", port, proxy.target.host, proxy.target.rdma ? "rdma" : "tcp",
         address_port((struct sockaddr *)&proxy.target.address));
  fflush(stdout);
  struct event *signals[] = {evsignal_new(proxy.base, SIGUSR1, on_figures, &proxy),
                             evsignal_new(proxy.base, SIGINT, on_stop, &proxy),
                             evsignal_new(proxy.base, SIGTERM, on_stop, &proxy)};
  for (int i = 0; i < 3; ++i) event_add(signals[i], NULL);
  event_base_dispatch(proxy.base);
  print_figures(&proxy, "at exit");
  while (proxy.links != NULL) link_free(proxy.links);
  for (int i = 0; i < 3; ++i) event_free(signals[i]);
  if (tcp != NULL) evconnlistener_free(tcp);
  if (rdma != NULL) evrdma_listener_free(rdma);
  if (proxy.rbase != NULL) evrdma_base_free(proxy.rbase);
  event_base_free(proxy.base);
  return 0;
}
