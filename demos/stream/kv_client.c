/* kv-client: kv-server's client, a libevent program in C. Over TCP or RDMA (a command-line
 * choice: only the connect differs), it either sends the lines it reads from standard input and
 * prints the replies (QUIT at the end of the input), or with --check N sets N keys, reads them
 * back pipelined, and checks every reply.
 *
 * --read-timeout makes a server that stops answering a BEV_EVENT_TIMEOUT (bufferevent_set_timeouts,
 * over either transport); --keepalive (RDMA) probes a silent server, and one that does not answer
 * (stopped, or its host gone) ends the stream with ETIMEDOUT.
 *
 *   usage: kv-client (--tcp | --rdma) ADDRESS PORT [--check N] [--timeout SECONDS]
 *                    [--read-timeout SECONDS] [--keepalive MS]
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "address.h"
#include "evrdma/evrdma.h"

struct client {
  struct event_base *base;
  struct bufferevent *bev;
  const char *transport;
  long check;          /* keys to check, or 0: standard input's lines */
  long replies;        /* replies read so far */
  long wrong;          /* replies that were not the expected one */
  int quit_sent, bye, eof, failed;
  struct event *stdin_event;
  struct evbuffer *typed; /* standard input not yet a whole line */
};

/* The value kept under key i: long enough that a few thousand of them make many messages. */
static void value_of(long i, char *out, size_t size) {
  snprintf(out, size, "value-%ld-abcdefghijklmnopqrstuvwxyz0123456789", i);
}

static void send_checks(struct client *client) {
  struct evbuffer *out = bufferevent_get_output(client->bev);
  char value[96];
  for (long i = 0; i < client->check; ++i) {
    value_of(i, value, sizeof value);
    evbuffer_add_printf(out, "SET key:%d:%ld %s\n", (int)getpid(), i, value);
  }
  for (long i = 0; i < client->check; ++i) evbuffer_add_printf(out, "GET key:%d:%ld\n", (int)getpid(), i);
  evbuffer_add_printf(out, "QUIT\n");
  client->quit_sent = 1;
}

/* Reply number `n` of a check run, as it should be. */
static void expected_reply(long n, long check, char *out, size_t size) {
  char value[96];
  if (n < check) {
    snprintf(out, size, "OK");
  } else if (n < 2 * check) {
    value_of(n - check, value, sizeof value);
    snprintf(out, size, "VALUE %s", value);
  } else {
    snprintf(out, size, "BYE");
  }
}

static void on_read(struct bufferevent *bev, void *arg) {
  struct client *client = arg;
  char *line, expected[128];
  size_t length;
  while ((line = evbuffer_readln(bufferevent_get_input(bev), &length, EVBUFFER_EOL_LF)) != NULL) {
    if (client->check > 0) {
      expected_reply(client->replies, client->check, expected, sizeof expected);
      if (strcmp(line, expected) != 0 && client->wrong++ < 5)
        fprintf(stderr, "kv-client: reply %ld is '%s', not '%s'\n", client->replies, line, expected);
    } else {
      printf("%s\n", line);
    }
    if (strcmp(line, "BYE") == 0) client->bye = 1;
    ++client->replies;
    free(line);
  }
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
  struct client *client = arg;
  (void)bev;
  if (what & BEV_EVENT_CONNECTED) return;
  if (what & BEV_EVENT_TIMEOUT) {
    fprintf(stderr, "kv-client: over %s: no reply within the read timeout\n", client->transport);
    client->failed = 1;
  } else if (what & BEV_EVENT_ERROR) {
    fprintf(stderr, "kv-client: over %s: %s\n", client->transport, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    client->failed = 1;
  }
  if (what & BEV_EVENT_EOF) client->eof = 1;
  event_base_loopbreak(client->base);
}

/* Standard input's whole lines go to the server; at its end, QUIT (unless it said so itself). */
static void on_typed(evutil_socket_t fd, short what, void *arg) {
  struct client *client = arg;
  char *line;
  size_t length;
  (void)what;
  int got = evbuffer_read(client->typed, fd, 4096);
  while ((line = evbuffer_readln(client->typed, &length, EVBUFFER_EOL_CRLF)) != NULL) {
    bufferevent_write(client->bev, line, length);
    bufferevent_write(client->bev, "\n", 1);
    if (strcmp(line, "QUIT") == 0) client->quit_sent = 1;
    free(line);
  }
  if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR))) return;
  if (evbuffer_get_length(client->typed) > 0) { /* a last line without its newline */
    bufferevent_write_buffer(client->bev, client->typed);
    bufferevent_write(client->bev, "\n", 1);
  }
  if (client->stdin_event != NULL) event_del(client->stdin_event);
  if (!client->quit_sent) bufferevent_write(client->bev, "QUIT\n", 5);
  client->quit_sent = 1;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg) {
  struct client *client = arg;
  (void)fd, (void)what;
  fprintf(stderr, "kv-client: no end after the timeout\n");
  client->failed = 1;
  event_base_loopbreak(client->base);
}

static int usage(const char *program, FILE *to, int status) {
  fprintf(to,
          "usage: %s (--tcp | --rdma) ADDRESS PORT [--check N] [--timeout SECONDS]\n"
          "                 [--read-timeout SECONDS] [--keepalive MS]\n"
          "  kv-server's client. Sends the lines of standard input and prints the replies, or with\n"
          "  --check N sets N keys, reads them back pipelined and checks every reply (exit 0 if\n"
          "  all are right). --timeout bounds the run (60 s); --read-timeout ends it when the\n"
          "  server sends nothing for that long; --keepalive (RDMA) probes a silent server every MS\n"
          "  and ends the run with ETIMEDOUT when it does not answer for 3 x MS.\n",
          program);
  return status;
}

static double seconds_now(void) {
  struct timeval now;
  gettimeofday(&now, NULL);
  return (double)now.tv_sec + now.tv_usec / 1e6;
}

int main(int argc, char **argv) {
  const char *host = NULL, *port = NULL;
  int rdma = -1;
  long timeout = 60, read_timeout = 0, keepalive = 0;
  struct client client;
  memset(&client, 0, sizeof client);
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(argv[0], stdout, 0);
    if (strcmp(argv[i], "--tcp") == 0) rdma = 0;
    else if (strcmp(argv[i], "--rdma") == 0) rdma = 1;
    else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc) client.check = atol(argv[++i]);
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) timeout = atol(argv[++i]);
    else if (strcmp(argv[i], "--read-timeout") == 0 && i + 1 < argc) read_timeout = atol(argv[++i]);
    else if (strcmp(argv[i], "--keepalive") == 0 && i + 1 < argc) keepalive = atol(argv[++i]);
    else if (argv[i][0] != '-' && host == NULL) host = argv[i];
    else if (argv[i][0] != '-' && port == NULL) port = argv[i];
    else return usage(argv[0], stderr, 2);
  }
  if (rdma < 0 || host == NULL || port == NULL || client.check < 0 || timeout <= 0 || read_timeout < 0 ||
      keepalive < 0 || (keepalive > 0 && !rdma))
    return usage(argv[0], stderr, 2);
  struct sockaddr_storage address;
  int length = 0;
  const int parsed = address_parse(host, port, &address, &length);
  if (parsed != 0) {
    fprintf(stderr, "kv-client: connect to %s port %s: %s\n", host, port, address_error(parsed));
    return 1;
  }

  client.base = event_base_new();
  client.transport = rdma ? "rdma" : "tcp";
  struct evrdma_base *rbase = NULL;
  /* The connect: all that differs between TCP and RDMA. */
  if (rdma) {
    struct evrdma_stream_options options;
    evrdma_stream_options_init(&options);
    options.keepalive_interval_ms = (unsigned)keepalive;
    rbase = evrdma_base_new(client.base);
    client.bev = rbase == NULL ? NULL
                               : evrdma_bufferevent_connect(rbase, (struct sockaddr *)&address, length, &options);
  } else {
    client.bev = bufferevent_socket_new(client.base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (client.bev != NULL && bufferevent_socket_connect(client.bev, (struct sockaddr *)&address, length) != 0) {
      bufferevent_free(client.bev);
      client.bev = NULL;
    }
  }
  if (client.bev == NULL) {
    fprintf(stderr, "kv-client: connect to %s port %s over %s: %s\n", host, port, client.transport, strerror(errno));
    if (rbase != NULL) evrdma_base_free(rbase);
    event_base_free(client.base);
    return 1;
  }
  bufferevent_setcb(client.bev, on_read, NULL, on_event, &client);
  bufferevent_enable(client.bev, EV_READ | EV_WRITE);
  if (read_timeout > 0) {
    struct timeval read_limit = {read_timeout, 0};
    bufferevent_set_timeouts(client.bev, &read_limit, NULL);
  }

  const double started = seconds_now();
  if (client.check > 0) {
    send_checks(&client);
  } else {
    client.typed = evbuffer_new();
    setvbuf(stdout, NULL, _IOLBF, 0); /* each reply shows as it comes, also in a file or a pipe */
    struct stat input;
    if (fstat(0, &input) == 0 && (S_ISREG(input.st_mode) || (S_ISCHR(input.st_mode) && !isatty(0)))) {
      /* A file (or /dev/null) cannot be watched (epoll refuses it) and never blocks: read it now. */
      while (!client.quit_sent) on_typed(0, EV_READ, &client);
    } else {
      evutil_make_socket_nonblocking(0);
      client.stdin_event = event_new(client.base, 0, EV_READ | EV_PERSIST, on_typed, &client);
      event_add(client.stdin_event, NULL);
    }
  }
  struct timeval limit = {timeout, 0};
  struct event *deadline = evtimer_new(client.base, on_deadline, &client);
  evtimer_add(deadline, &limit);
  event_base_dispatch(client.base);
  const double took = seconds_now() - started;

  int status = client.failed || !client.bye ? 1 : 0;
  if (client.check > 0) {
    const long expected = 2 * client.check + 1;
    if (client.wrong > 0 || client.replies != expected) status = 1;
    printf("kv-client: %ld SET and %ld GET over %s: %ld of %ld replies, %ld wrong, %s (%.0f ms, %.0f commands/s)\n",
           client.check, client.check, client.transport, client.replies, expected, client.wrong,
           status == 0 ? "all right" : "FAILED", took * 1e3, expected / took);
  } else if (!client.failed && !client.bye) {
    fprintf(stderr, "kv-client: the server closed without BYE\n");
  }
  event_free(deadline);
  if (client.stdin_event != NULL) event_free(client.stdin_event);
  if (client.typed != NULL) evbuffer_free(client.typed);
  bufferevent_free(client.bev);
  if (rbase != NULL) evrdma_base_free(rbase);
  event_base_free(client.base);
  return status;
}
