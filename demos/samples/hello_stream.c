/* hello_stream: libevent's sample/hello-world.c in the shape a C program over RDMA takes, both ends
 * of a byte stream in one file. The server echoes what each client writes and frees the client's
 * bufferevent at its EOF (what it wrote still goes, then the client reads EOF); the client writes
 * its message, shuts its side down, prints what came back and exits. Each is a struct bufferevent
 * on the program's own event_base; only the listen and the connect name evrdma.
 *   usage: hello_stream --listen ADDRESS PORT      (a server; PORT 0: any free one, printed)
 *          hello_stream ADDRESS PORT [MESSAGE]     (a client; MESSAGE: hello)
 */
#define _POSIX_C_SOURCE 200809L /* getaddrinfo, in C99 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evrdma/evrdma.h"

/* ---- the server ---- */

static void echo_read(struct bufferevent *bev, void *arg) {
  (void)arg;
  bufferevent_write_buffer(bev, bufferevent_get_input(bev)); /* moves the bytes, no copy */
}

static void echo_event(struct bufferevent *bev, short what, void *arg) {
  (void)arg;
  if (what & BEV_EVENT_ERROR)
    fprintf(stderr, "hello_stream: a client failed: %s\n", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) bufferevent_free(bev); /* what it wrote still goes */
}

static void on_accept(struct evrdma_listener *listener, struct bufferevent *bev, const struct sockaddr *peer,
                      int socklen, void *arg) {
  (void)listener, (void)peer, (void)socklen, (void)arg;
  bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void on_signal(evutil_socket_t signal, short what, void *base) {
  (void)signal, (void)what;
  event_base_loopexit(base, NULL);
}

/* ---- the client ---- */

struct client {
  const char *message;
  struct evbuffer *echo; /* what came back so far */
  int status;            /* the exit status: 0 once the whole echo came, then EOF */
};

static void client_read(struct bufferevent *bev, void *arg) {
  struct client *client = arg;
  evbuffer_add_buffer(client->echo, bufferevent_get_input(bev));
}

static void client_event(struct bufferevent *bev, short what, void *arg) {
  struct client *client = arg;
  if (what & BEV_EVENT_CONNECTED) {
    bufferevent_write(bev, client->message, strlen(client->message));
    evrdma_bufferevent_shutdown_write(bev); /* the server reads it all, then EOF */
    return;
  }
  if (what & BEV_EVENT_EOF) {
    size_t length = evbuffer_get_length(client->echo);
    printf("echo: %.*s\n", (int)length, (const char *)evbuffer_pullup(client->echo, -1));
    client->status = length == strlen(client->message) ? 0 : 1;
  } else if (what & BEV_EVENT_ERROR) {
    fprintf(stderr, "hello_stream: %s\n", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  }
  event_base_loopexit(bufferevent_get_base(bev), NULL);
}

/* ---- one of the two, on the program's own loop ---- */

/* A numeric IPv4 or IPv6 address and a port (a host name would need a lookup, which blocks). */
static int parse_address(const char *host, const char *port, struct sockaddr_storage *out, int *length) {
  char *end = NULL;
  if (*port == '\0' || strtoul(port, &end, 10) > 65535 || *end != '\0') { /* getaddrinfo would wrap it */
    fprintf(stderr, "hello_stream: '%s' is not a port (0 to 65535)\n", port);
    return -1;
  }
  struct addrinfo hints, *found = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &found) != 0) {
    fprintf(stderr, "hello_stream: '%s' is not a numeric IPv4 or IPv6 address\n", host);
    return -1;
  }
  memcpy(out, found->ai_addr, found->ai_addrlen);
  *length = (int)found->ai_addrlen;
  freeaddrinfo(found);
  return 0;
}

int main(int argc, char **argv) {
  const int serving = argc > 1 && strcmp(argv[1], "--listen") == 0;
  struct sockaddr_storage address;
  int length = 0;
  const int help = argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
  if (help || argc < 3 + serving || argc > 4) {
    fprintf(help ? stdout : stderr, "usage: %s --listen ADDRESS PORT | ADDRESS PORT [MESSAGE]\n", argv[0]);
    return help ? 0 : 2;
  }
  if (parse_address(argv[1 + serving], argv[2 + serving], &address, &length) != 0) return 2;
  struct event_base *base = event_base_new();
  struct evrdma_base *rbase = base != NULL ? evrdma_base_new(base) : NULL; /* evrdma on that loop */
  struct client client = {argc > 3 && !serving ? argv[3] : "hello", evbuffer_new(), 1};
  struct evrdma_listener *listener = NULL;
  struct bufferevent *bev = NULL;
  if (rbase == NULL || client.echo == NULL) {
    fprintf(stderr, "hello_stream: cannot make an event loop\n");
  } else if (serving) {
    listener = evrdma_listener_new_bind(rbase, on_accept, NULL, 0, -1, (struct sockaddr *)&address, length, NULL);
    if (listener == NULL) {
      fprintf(stderr, "hello_stream: listen on %s port %s: %s\n", argv[2], argv[3], strerror(errno));
    } else {
      printf("hello_stream: listening on port %u\n", (unsigned)evrdma_listener_get_port(listener));
      fflush(stdout);
      struct event *interrupt = evsignal_new(base, SIGINT, on_signal, base);
      event_add(interrupt, NULL);
      event_base_dispatch(base); /* until SIGINT */
      event_free(interrupt);
      client.status = 0;
    }
  } else {
    bev = evrdma_bufferevent_connect(rbase, (struct sockaddr *)&address, length, NULL);
    if (bev == NULL) {
      fprintf(stderr, "hello_stream: connect to %s port %s: %s\n", argv[1], argv[2], strerror(errno));
    } else {
      bufferevent_setcb(bev, client_read, NULL, client_event, &client);
      bufferevent_enable(bev, EV_READ | EV_WRITE);
      event_base_dispatch(base); /* until the echo and EOF, or an error */
      bufferevent_free(bev);
    }
  }
  if (listener != NULL) evrdma_listener_free(listener);
  if (rbase != NULL) evrdma_base_free(rbase); /* streams still sending finish first */
  if (listener != NULL) event_base_loop(base, EVLOOP_NONBLOCK); /* clients still open: ESHUTDOWN, freed */
  if (client.echo != NULL) evbuffer_free(client.echo);
  if (base != NULL) event_base_free(base);
  return client.status;
}
