/* kv-server: an in-memory key-value server with a line protocol, written as a libevent program
 * in C. Its protocol code works on a struct bufferevent and does not know the transport: TCP
 * connections come from an evconnlistener, RDMA ones from an evrdma_listener, and both meet the
 * same serve(). SIGINT or SIGTERM stops it, printing what it served.
 *
 *   SET key value   -> OK                    GET key -> VALUE value | NOT_FOUND
 *   DEL key         -> DELETED | NOT_FOUND   COUNT   -> COUNT n
 *   QUIT            -> BYE, then the server closes
 *
 *   usage: kv-server ADDRESS [--tcp PORT] [--rdma PORT] [--send-timeout SECONDS]
 *          (PORT 0: any free one; it is printed)
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "evrdma/evrdma.h"

enum {
  kMaxLine = 64 * 1024,          /* a longer line is an error, and the server closes */
  kRepliesHeld = 1024 * 1024,    /* past this much unread reply, stop reading the client */
  kBuckets = 1 << 16,
};

struct entry {
  struct entry *next;
  char *key;
  char *value;
};

struct server {
  struct event_base *base;
  struct timeval send_timeout; /* a client that takes none of its replies this long is dropped */
  struct entry *buckets[kBuckets];
  unsigned long keys;
  struct session *sessions; /* open ones, to free at exit */
  unsigned long served_tcp, served_rdma, commands;
};

struct session {
  struct server *server;
  struct bufferevent *bev;
  struct session *prev, *next;
  int closing; /* the last reply goes out, then the session ends */
};

/* ---- the store ---- */

static struct entry **slot_of(struct server *server, const char *key) {
  uint32_t hash = 2166136261u;
  for (const char *c = key; *c != '\0'; ++c) hash = (hash ^ (unsigned char)*c) * 16777619u;
  struct entry **slot = &server->buckets[hash & (kBuckets - 1)];
  while (*slot != NULL && strcmp((*slot)->key, key) != 0) slot = &(*slot)->next;
  return slot; /* the entry's link, or the null link at the chain's end */
}

static int store_set(struct server *server, const char *key, const char *value) {
  struct entry **slot = slot_of(server, key);
  char *copy = strdup(value);
  if (copy == NULL) return -1;
  if (*slot != NULL) {
    free((*slot)->value);
    (*slot)->value = copy;
    return 0;
  }
  struct entry *entry = malloc(sizeof *entry);
  if (entry == NULL || (entry->key = strdup(key)) == NULL) {
    free(entry);
    free(copy);
    return -1;
  }
  entry->value = copy;
  entry->next = NULL;
  *slot = entry;
  ++server->keys;
  return 0;
}

static int store_delete(struct server *server, const char *key) {
  struct entry **slot = slot_of(server, key);
  struct entry *entry = *slot;
  if (entry == NULL) return 0;
  *slot = entry->next;
  free(entry->key);
  free(entry->value);
  free(entry);
  --server->keys;
  return 1;
}

static void store_clear(struct server *server) {
  for (int i = 0; i < kBuckets; ++i) {
    while (server->buckets[i] != NULL) store_delete(server, server->buckets[i]->key);
  }
}

/* ---- the protocol: one bufferevent, whatever carries it ---- */

static void session_end(struct session *session) {
  struct server *server = session->server;
  if (session->prev != NULL) session->prev->next = session->next;
  else server->sessions = session->next;
  if (session->next != NULL) session->next->prev = session->prev;
  bufferevent_free(session->bev);
  free(session);
}

/* The session ends once its last reply has gone: at the end of the callback that called this
 * (end_if_sent), or in on_write once the output is drained. */
static void close_when_sent(struct session *session) {
  session->closing = 1;
  bufferevent_disable(session->bev, EV_READ);
}

/* A callback's last step: a closing session whose output has gone ends. */
static void end_if_sent(struct session *session) {
  if (session->closing && evbuffer_get_length(bufferevent_get_output(session->bev)) == 0) session_end(session);
}

/* Runs one command line; its reply goes to `out`. */
static void execute(struct session *session, char *line, struct evbuffer *out) {
  struct server *server = session->server;
  char *rest = line;
  char *command = strsep(&rest, " ");
  ++server->commands;
  if (strcmp(command, "SET") == 0) {
    char *key = rest != NULL ? strsep(&rest, " ") : NULL;
    if (key == NULL || *key == '\0' || rest == NULL) evbuffer_add_printf(out, "ERROR usage: SET key value\n");
    else if (store_set(server, key, rest) != 0) evbuffer_add_printf(out, "ERROR out of memory\n");
    else evbuffer_add_printf(out, "OK\n");
  } else if (strcmp(command, "GET") == 0 || strcmp(command, "DEL") == 0) {
    if (rest == NULL || *rest == '\0' || strchr(rest, ' ') != NULL) {
      evbuffer_add_printf(out, "ERROR usage: %s key\n", command);
    } else if (command[0] == 'G') {
      struct entry *entry = *slot_of(server, rest);
      if (entry != NULL) evbuffer_add_printf(out, "VALUE %s\n", entry->value);
      else evbuffer_add_printf(out, "NOT_FOUND\n");
    } else {
      evbuffer_add_printf(out, store_delete(server, rest) ? "DELETED\n" : "NOT_FOUND\n");
    }
  } else if (strcmp(command, "COUNT") == 0) {
    evbuffer_add_printf(out, "COUNT %lu\n", server->keys);
  } else if (strcmp(command, "QUIT") == 0) {
    evbuffer_add_printf(out, "BYE\n");
    close_when_sent(session);
  } else if (*command != '\0') {
    evbuffer_add_printf(out, "ERROR unknown command '%.40s'\n", command);
  }
}

/* Runs the whole lines that have come; a line too long ends the session. */
static void run_lines(struct session *session) {
  struct evbuffer *in = bufferevent_get_input(session->bev);
  struct evbuffer *out = bufferevent_get_output(session->bev);
  char *line = NULL;
  size_t length;
  while (!session->closing && (line = evbuffer_readln(in, &length, EVBUFFER_EOL_CRLF)) != NULL) {
    if (length > kMaxLine) {
      free(line);
      break;
    }
    execute(session, line, out);
    free(line);
  }
  if (session->closing) return;
  if (line != NULL || evbuffer_get_length(in) > kMaxLine) {
    evbuffer_add_printf(out, "ERROR line longer than %d bytes\n", kMaxLine);
    close_when_sent(session);
  } else if (evbuffer_get_length(out) > kRepliesHeld) {
    bufferevent_disable(session->bev, EV_READ); /* a client that does not read its replies waits */
  }
}

static void on_read(struct bufferevent *bev, void *arg) {
  (void)bev;
  run_lines(arg);
  end_if_sent(arg);
}

static void on_write(struct bufferevent *bev, void *arg) {
  struct session *session = arg; /* the output is drained */
  if (session->closing) {
    session_end(session);
    return;
  }
  bufferevent_enable(bev, EV_READ);
  run_lines(session); /* lines that waited while reading was off */
  end_if_sent(session);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
  struct session *session = arg;
  (void)bev;
  if (what & BEV_EVENT_ERROR) {
    fprintf(stderr, "kv-server: a connection failed: %s\n", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    session_end(session);
  } else if (what & BEV_EVENT_TIMEOUT) { /* TCP: its replies waited for the send timeout */
    fprintf(stderr, "kv-server: a connection failed: the client took none of its replies for %ld s\n",
            (long)session->server->send_timeout.tv_sec);
    session_end(session);
  } else if (what & BEV_EVENT_EOF) {
    run_lines(session); /* what came before the client's EOF is answered */
    close_when_sent(session);
    end_if_sent(session);
  }
}

static void serve(struct server *server, struct bufferevent *bev) {
  struct session *session = calloc(1, sizeof *session);
  if (bev == NULL || session == NULL) {
    fprintf(stderr, "kv-server: no memory for a connection\n");
    if (bev != NULL) bufferevent_free(bev);
    free(session);
    return;
  }
  session->server = server;
  session->bev = bev;
  session->next = server->sessions;
  if (server->sessions != NULL) server->sessions->prev = session;
  server->sessions = session;
  bufferevent_setcb(bev, on_read, on_write, on_event, session);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* ---- the two listeners: all that differs between TCP and RDMA ---- */

static void on_tcp_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *peer, int socklen,
                          void *arg) {
  struct server *server = arg;
  (void)listener, (void)peer, (void)socklen;
  ++server->served_tcp;
  struct bufferevent *bev = bufferevent_socket_new(server->base, fd, BEV_OPT_CLOSE_ON_FREE);
  /* libevent's write timeout runs while replies wait to go: the RDMA streams' send_timeout_ms. */
  if (bev != NULL && server->send_timeout.tv_sec > 0) bufferevent_set_timeouts(bev, NULL, &server->send_timeout);
  serve(server, bev);
}

static void on_rdma_accept(struct evrdma_listener *listener, struct bufferevent *bev, const struct sockaddr *peer,
                           int socklen, void *arg) {
  struct server *server = arg;
  (void)listener, (void)peer, (void)socklen;
  ++server->served_rdma;
  serve(server, bev);
}

static void on_signal(evutil_socket_t signal, short what, void *arg) {
  (void)signal, (void)what;
  event_base_loopexit(arg, NULL);
}

static int usage(const char *program, FILE *to, int status) {
  fprintf(to,
          "usage: %s ADDRESS [--tcp PORT] [--rdma PORT] [--send-timeout SECONDS]\n"
          "  An in-memory key-value server with a line protocol (SET key value, GET key, DEL key,\n"
          "  COUNT, QUIT), over TCP and RDMA byte streams at once. Without --tcp or --rdma it\n"
          "  listens on both, on any free ports (PORT 0), and prints them. A client that takes\n"
          "  none of its replies for the send timeout (60 s; 0: never) is dropped. SIGINT stops it.\n",
          program);
  return status;
}

int main(int argc, char **argv) {
  const char *host = NULL, *tcp_port = NULL, *rdma_port = NULL;
  long send_timeout = 60;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(argv[0], stdout, 0);
    if (strcmp(argv[i], "--tcp") == 0 && i + 1 < argc) tcp_port = argv[++i];
    else if (strcmp(argv[i], "--rdma") == 0 && i + 1 < argc) rdma_port = argv[++i];
    else if (strcmp(argv[i], "--send-timeout") == 0 && i + 1 < argc) {
      char *end = NULL;
      send_timeout = strtol(argv[++i], &end, 10);
      if (*argv[i] == '\0' || *end != '\0' || send_timeout < 0 || send_timeout > 86400) {
        fprintf(stderr, "kv-server: '%s' is not a send timeout (0 to 86400 seconds)\n", argv[i]);
        return 2;
      }
    }
    else if (argv[i][0] != '-' && host == NULL) host = argv[i];
    else return usage(argv[0], stderr, 2);
  }
  if (host == NULL) return usage(argv[0], stderr, 2);
  if (tcp_port == NULL && rdma_port == NULL) tcp_port = rdma_port = "0";

  struct sockaddr_storage tcp_address, rdma_address;
  int tcp_length = 0, rdma_length = 0;
  int parsed = 0;
  const char *transport = "tcp", *port = tcp_port;
  if (tcp_port != NULL) parsed = address_parse(host, tcp_port, &tcp_address, &tcp_length);
  if (parsed == 0 && rdma_port != NULL) {
    transport = "rdma";
    port = rdma_port;
    parsed = address_parse(host, rdma_port, &rdma_address, &rdma_length);
  }
  if (parsed != 0) {
    fprintf(stderr, "kv-server: listen on %s %s port %s: %s\n", host, transport, port, address_error(parsed));
    return 1;
  }

  static struct server server; /* its buckets are large */
  server.base = event_base_new();
  server.send_timeout.tv_sec = send_timeout;
  struct evrdma_base *rbase = NULL;
  struct evconnlistener *tcp = NULL;
  struct evrdma_listener *rdma = NULL;
  int status = 1;
  if (server.base == NULL) {
    fprintf(stderr, "kv-server: event_base_new failed\n");
    return 1;
  }
  if (tcp_port != NULL) {
    tcp = evconnlistener_new_bind(server.base, on_tcp_accept, &server, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
                                  (struct sockaddr *)&tcp_address, tcp_length);
    if (tcp == NULL) {
      fprintf(stderr, "kv-server: listen on %s tcp port %s: %s\n", host, tcp_port, strerror(errno));
      goto out;
    }
    printf("kv-server: listening on %s tcp port %u\n", host, tcp_listener_port(tcp));
  }
  if (rdma_port != NULL) {
    rbase = evrdma_base_new(server.base);
    struct evrdma_stream_options options;
    evrdma_stream_options_init(&options);
    options.send_timeout_ms = (unsigned)send_timeout * 1000u;
    rdma = rbase == NULL ? NULL
                         : evrdma_listener_new_bind(rbase, on_rdma_accept, &server,
                                                    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
                                                    (struct sockaddr *)&rdma_address, rdma_length, &options);
    if (rdma == NULL) {
      fprintf(stderr, "kv-server: listen on %s rdma port %s: %s\n", host, rdma_port, strerror(errno));
      goto out;
    }
    printf("kv-server: listening on %s rdma port %u\n", host, (unsigned)evrdma_listener_get_port(rdma));
  }
  fflush(stdout);

  struct event *interrupt = evsignal_new(server.base, SIGINT, on_signal, server.base);
  struct event *terminate = evsignal_new(server.base, SIGTERM, on_signal, server.base);
  event_add(interrupt, NULL);
  event_add(terminate, NULL);
  event_base_dispatch(server.base);
  event_free(interrupt);
  event_free(terminate);
  printf("kv-server: served %lu connections (%lu tcp, %lu rdma), %lu commands; %lu keys held\n",
         server.served_tcp + server.served_rdma, server.served_tcp, server.served_rdma, server.commands, server.keys);
  status = 0;

out:
  while (server.sessions != NULL) session_end(server.sessions);
  if (tcp != NULL) evconnlistener_free(tcp);
  if (rdma != NULL) evrdma_listener_free(rdma);
  if (rbase != NULL) evrdma_base_free(rbase);
  event_base_free(server.base);
  store_clear(&server);
  return status;
}
