/* stream-bench: one bufferevent program measuring a byte stream over TCP or RDMA (a command-line
 * choice: only the connect and the listener differ, and the half-close).
 *   throughput: the client writes --bytes in writes of --size bytes, half-closes, and the server
 *               answers with what it counted and the CPU it spent; both sides' CPU per GB printed;
 *   latency:    ping-pong of --size bytes, --count times; the half round trip printed;
 *   verify:     --bytes of pseudo-random data in writes of random sizes (1 to 200,000 bytes), echoed
 *               by the server as they come (both ways at once), then a half-close: the SHA-256 of
 *               what came back must equal that of what was sent.
 * The server serves any number of runs, one after another or at once, until SIGINT. With --tls
 * (both sides) every connection is TLS over the transport (libevent's OpenSSL filter): a run then
 * ends by its announced byte count, since TLS over a bufferevent has no half-close.
 *
 *   usage: stream-bench --server (--tcp | --rdma) ADDRESS PORT [--tls]
 *          stream-bench (--tcp | --rdma) ADDRESS PORT (--throughput | --latency | --verify) [--size N]
 *                       [--bytes N] [--count N] [--timeout SECONDS] [--poll USEC] [--copy] [--tls]
 *                       [--in-place]
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "address.h"
#include "evrdma/evrdma.h"
#include "sha256.h"
#include "tls.h"

enum { kOutputLow = 1 << 20, kOutputHigh = 4 << 20, kWarmup = 100, kLongestVerifyWrite = 200000 };

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + now.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

/* The half-close: over RDMA evrdma's call; over TCP shutdown() once the output has gone. */
static void shutdown_write(struct bufferevent *bev, int rdma) {
  if (rdma) evrdma_bufferevent_shutdown_write(bev);
  else shutdown(bufferevent_getfd(bev), SHUT_WR);
}

/* ---- the server ---- */

struct session {
  int mode;          /* 0: the first line is still coming; 'S': sink; 'E': echo */
  uint64_t bytes;
  uint64_t announced; /* the bytes the client said it will send (TLS), else 0: until its EOF */
  double cpu_at_start;
  int closing;
};

static void session_end(struct bufferevent *bev, struct session *session) {
  bufferevent_free(bev);
  free(session);
}

static void server_read(struct bufferevent *bev, void *arg) {
  struct session *session = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  if (session->mode == 0) {
    char *line = evbuffer_readln(in, NULL, EVBUFFER_EOL_LF);
    if (line == NULL) return;
    char word[8] = "";
    unsigned long long announced = 0;
    if (sscanf(line, "%7s %llu", word, &announced) < 1) word[0] = 0;
    session->mode = strcmp(word, "SINK") == 0 ? 'S' : strcmp(word, "ECHO") == 0 ? 'E' : '?';
    session->announced = announced;
    session->cpu_at_start = cpu_seconds();
    free(line);
    if (session->mode == '?') {
      session_end(bev, session);
      return;
    }
  }
  session->bytes += evbuffer_get_length(in);
  if (session->mode == 'E') {
    bufferevent_write_buffer(bev, in);
  } else {
    evbuffer_drain(in, evbuffer_get_length(in));
    /* All announced bytes came: the answer, and the client closes once it has it. */
    if (session->announced != 0 && session->bytes == session->announced)
      evbuffer_add_printf(bufferevent_get_output(bev), "DONE %llu %.6f\n", (unsigned long long)session->bytes,
                          cpu_seconds() - session->cpu_at_start);
  }
}

static void server_write(struct bufferevent *bev, void *arg) {
  struct session *session = arg;
  if (session->closing) session_end(bev, session);
}

static void server_event(struct bufferevent *bev, short what, void *arg) {
  struct session *session = arg;
  if ((what & BEV_EVENT_EOF) && session->mode == 'E') {
    server_read(bev, session); /* the last bytes go back too, then the session ends */
    session->closing = 1;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) session_end(bev, session);
    return;
  }
  if ((what & BEV_EVENT_EOF) && session->mode == 'S') {
    server_read(bev, session);
    evbuffer_add_printf(bufferevent_get_output(bev), "DONE %llu %.6f\n", (unsigned long long)session->bytes,
                        cpu_seconds() - session->cpu_at_start);
    session->closing = 1; /* ends once the answer has gone */
    return;
  }
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) session_end(bev, session);
}

static void serve(struct bufferevent *bev) {
  struct session *session = calloc(1, sizeof *session);
  if (bev == NULL || session == NULL) {
    if (bev != NULL) bufferevent_free(bev);
    free(session);
    return;
  }
  bufferevent_setcb(bev, server_read, server_write, server_event, session);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* A connection taken: TLS on top if the server was asked for it. */
static void take(struct bufferevent *bev, SSL_CTX *tls) {
  if (bev != NULL && tls != NULL) bev = tls_wrap(bev, tls, 1);
  serve(bev);
}

static void on_tcp_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *peer, int socklen,
                          void *arg) {
  (void)peer, (void)socklen;
  take(bufferevent_socket_new(evconnlistener_get_base(listener), fd, BEV_OPT_CLOSE_ON_FREE), arg);
}

static void on_rdma_accept(struct evrdma_listener *listener, struct bufferevent *bev, const struct sockaddr *peer,
                           int socklen, void *arg) {
  (void)listener, (void)peer, (void)socklen;
  take(bev, arg);
}

static void on_signal(evutil_socket_t signal, short what, void *arg) {
  (void)signal, (void)what;
  event_base_loopexit(arg, NULL);
}

static int run_server(struct event_base *base, struct evrdma_base *rbase, int rdma, SSL_CTX *tls, const char *host,
                      struct sockaddr *address, int length, const struct evrdma_stream_options *options) {
  struct evconnlistener *tcp = NULL;
  struct evrdma_listener *listener = NULL;
  if (rdma) listener = evrdma_listener_new_bind(rbase, on_rdma_accept, tls, 0, -1, address, length, options);
  else tcp = evconnlistener_new_bind(base, on_tcp_accept, tls, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
                                     address, length);
  if (listener == NULL && tcp == NULL) {
    fprintf(stderr, "stream-bench: listen on %s: %s\n", host, strerror(errno));
    return 1;
  }
  const unsigned port = tcp != NULL ? tcp_listener_port(tcp) : evrdma_listener_get_port(listener);
  printf("stream-bench: listening on %s %s%s port %u\n", host, rdma ? "rdma" : "tcp", tls ? "+tls" : "", port);
  fflush(stdout);
  struct event *interrupt = evsignal_new(base, SIGINT, on_signal, base);
  struct event *terminate = evsignal_new(base, SIGTERM, on_signal, base);
  event_add(interrupt, NULL);
  event_add(terminate, NULL);
  event_base_dispatch(base);
  event_free(interrupt);
  event_free(terminate);
  if (tcp != NULL) evconnlistener_free(tcp);
  if (listener != NULL) evrdma_listener_free(listener);
  return 0;
}

/* ---- the client ---- */

struct run {
  struct event_base *base;
  struct bufferevent *bev;
  SSL_CTX *tls;  /* TLS on top of the transport, or NULL */
  int rdma, latency, verify, failed, done;
  uint64_t random;                 /* verify: the sizes' and the bytes' generator */
  struct sha256 sent_hash, received_hash;
  uint64_t received;
  size_t size;
  uint64_t bytes, written;  /* throughput */
  long count, rounds;       /* latency: rounds done, the warm-up's first */
  double started, finished, cpu_started, server_cpu;
  uint64_t server_bytes;
  char *chunk;
  double *round_times;
};

static uint64_t next_random(struct run *run) { /* xorshift64 */
  run->random ^= run->random << 13;
  run->random ^= run->random >> 7;
  run->random ^= run->random << 17;
  return run->random;
}

static void write_more(struct run *run) {
  struct evbuffer *out = bufferevent_get_output(run->bev);
  while (run->written < run->bytes && evbuffer_get_length(out) < kOutputHigh) {
    size_t n = run->verify ? (size_t)(next_random(run) % kLongestVerifyWrite) + 1 : run->size;
    if (run->bytes - run->written < n) n = (size_t)(run->bytes - run->written);
    if (run->verify) {
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t word = next_random(run);
        memcpy(run->chunk + i, &word, n - i < 8 ? n - i : 8);
      }
      sha256_update(&run->sent_hash, run->chunk, n);
    }
    bufferevent_write(run->bev, run->chunk, n);
    run->written += n;
  }
  if (run->written == run->bytes && !run->done) {
    run->done = 1;
    if (run->tls) return; /* no half-close: the server counts what was announced */
    if (run->rdma) shutdown_write(run->bev, 1);
    else bufferevent_setwatermark(run->bev, EV_WRITE, 0, 0); /* TCP: shut down once it has gone */
  }
}

static void client_write(struct bufferevent *bev, void *arg) {
  struct run *run = arg;
  if (run->latency) return;
  if (!run->done) write_more(run);
  else if (!run->rdma && !run->tls && evbuffer_get_length(bufferevent_get_output(bev)) == 0) shutdown_write(bev, 0);
}

static void start(struct run *run) {
  run->started = seconds_now();
  run->cpu_started = cpu_seconds();
  if (run->latency) {
    bufferevent_write(run->bev, run->chunk, run->size);
  } else {
    if (run->verify) {
      sha256_init(&run->sent_hash);
      sha256_init(&run->received_hash);
    }
    bufferevent_setwatermark(run->bev, EV_WRITE, kOutputLow, 0);
    write_more(run);
  }
}

static void client_read(struct bufferevent *bev, void *arg) {
  struct run *run = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  if (run->verify) {
    struct evbuffer_iovec pieces[16];
    while (evbuffer_get_length(in) > 0) {
      const int count = evbuffer_peek(in, -1, NULL, pieces, 16);
      size_t taken = 0;
      for (int i = 0; i < count && i < 16; ++i) {
        sha256_update(&run->received_hash, pieces[i].iov_base, pieces[i].iov_len);
        taken += pieces[i].iov_len;
      }
      evbuffer_drain(in, taken);
      run->received += taken;
    }
    if (run->tls && run->received == run->bytes) { /* all of the echo came back */
      run->finished = seconds_now();
      event_base_loopbreak(run->base);
    }
    return;
  }
  if (!run->latency) {
    char *line = evbuffer_readln(in, NULL, EVBUFFER_EOL_LF);
    if (line == NULL) return;
    unsigned long long bytes = 0;
    if (sscanf(line, "DONE %llu %lf", &bytes, &run->server_cpu) != 2) run->failed = 1;
    run->server_bytes = bytes;
    run->finished = seconds_now();
    free(line);
    event_base_loopbreak(run->base);
    return;
  }
  while (evbuffer_get_length(in) >= run->size) {
    evbuffer_drain(in, run->size);
    const double now = seconds_now();
    if (run->rounds >= kWarmup) run->round_times[run->rounds - kWarmup] = now - run->started;
    run->started = now;
    if (++run->rounds == run->count + kWarmup) {
      run->finished = now;
      event_base_loopbreak(run->base);
      return;
    }
    bufferevent_write(bev, run->chunk, run->size);
  }
}

static void client_event(struct bufferevent *bev, short what, void *arg) {
  struct run *run = arg;
  if (what & BEV_EVENT_CONNECTED) {
    start(run);
    return;
  }
  if (run->finished != 0 && !(what & BEV_EVENT_ERROR)) return; /* the server's EOF after its answer */
  if (run->verify && (what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
    client_read(bev, run);
    run->finished = seconds_now(); /* all of the echo came back */
    event_base_loopbreak(run->base);
    return;
  }
  const unsigned long tls_error = run->tls != NULL ? bufferevent_get_openssl_error(bev) : 0;
  if ((what & BEV_EVENT_ERROR) && tls_error != 0)
    fprintf(stderr, "stream-bench: TLS over %s: %s\n", run->rdma ? "rdma" : "tcp", ERR_error_string(tls_error, NULL));
  else if (what & BEV_EVENT_ERROR)
    fprintf(stderr, "stream-bench: over %s: %s\n", run->rdma ? "rdma" : "tcp",
            evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  else
    fprintf(stderr, "stream-bench: the server closed before the end (event 0x%x, %zu bytes unread)\n", what,
            evbuffer_get_length(bufferevent_get_input(bev)));
  run->failed = 1;
  event_base_loopbreak(run->base);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg) {
  struct run *run = arg;
  (void)fd, (void)what;
  fprintf(stderr, "stream-bench: no end after the timeout\n");
  run->failed = 1;
  event_base_loopbreak(run->base);
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int run_client(struct run *run, struct evrdma_base *rbase, const char *host, struct sockaddr *address,
                      int length, long timeout, const struct evrdma_stream_options *options) {
  const char *transport = run->rdma ? (run->tls ? "rdma+tls" : "rdma") : (run->tls ? "tcp+tls" : "tcp");
  if (run->rdma) {
    run->bev = evrdma_bufferevent_connect(rbase, address, length, options);
  } else {
    run->bev = bufferevent_socket_new(run->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (run->bev != NULL && bufferevent_socket_connect(run->bev, address, length) != 0) {
      bufferevent_free(run->bev);
      run->bev = NULL;
    }
  }
  if (run->bev == NULL) {
    fprintf(stderr, "stream-bench: connect to %s over %s: %s\n", host, transport, strerror(errno));
    return 1;
  }
  if (run->tls != NULL && (run->bev = tls_wrap(run->bev, run->tls, 0)) == NULL) {
    fprintf(stderr, "stream-bench: TLS over %s: %s\n", transport, tls_last_error());
    return 1;
  }
  run->chunk = malloc(run->verify ? kLongestVerifyWrite : run->size);
  run->round_times = run->latency ? calloc((size_t)run->count, sizeof(double)) : NULL;
  if (run->chunk == NULL || (run->latency && run->round_times == NULL)) {
    fprintf(stderr, "stream-bench: out of memory\n");
    return 1;
  }
  memset(run->chunk, 'x', run->size);
  bufferevent_setcb(run->bev, client_read, client_write, client_event, run);
  if (run->latency) bufferevent_setwatermark(run->bev, EV_READ, run->size, 0);
  bufferevent_enable(run->bev, EV_READ | EV_WRITE);
  /* With TLS the run's length is announced: the server ends it by count, not by a half-close. */
  const uint64_t announced = run->latency ? (uint64_t)(run->count + kWarmup) * run->size : run->bytes;
  if (run->tls) evbuffer_add_printf(bufferevent_get_output(run->bev), "%s %llu\n",
                                    run->latency || run->verify ? "ECHO" : "SINK", (unsigned long long)announced);
  else bufferevent_write(run->bev, run->latency || run->verify ? "ECHO\n" : "SINK\n", 5);
  struct timeval limit = {timeout, 0};
  struct event *deadline = evtimer_new(run->base, on_deadline, run);
  evtimer_add(deadline, &limit);
  event_base_dispatch(run->base);
  event_free(deadline);
  const double cpu = cpu_seconds() - run->cpu_started;
  int status = run->failed;
  if (!run->failed && run->verify) {
    char sent[65], received[65];
    sha256_hex(&run->sent_hash, sent);
    sha256_hex(&run->received_hash, received);
    const int equal = run->received == run->bytes && strcmp(sent, received) == 0;
    printf("stream-bench: %s verify bytes=%llu received=%llu seconds=%.3f sent_sha256=%s echoed_sha256=%s %s\n",
           transport, (unsigned long long)run->bytes, (unsigned long long)run->received,
           run->finished - run->started, sent, received, equal ? "equal" : "DIFFERENT");
    status = !equal;
  } else if (!run->failed && run->latency) {
    qsort(run->round_times, (size_t)run->count, sizeof(double), by_value);
    double total = 0;
    for (long i = 0; i < run->count; ++i) total += run->round_times[i];
    printf("stream-bench: %s latency size=%zu count=%ld half_rtt_us=%.2f p50_us=%.2f p99_us=%.2f "
           "client_cpu_us_per_round=%.2f\n",
           transport, run->size, run->count, total / run->count / 2 * 1e6, run->round_times[run->count / 2] / 2 * 1e6,
           run->round_times[run->count * 99 / 100] / 2 * 1e6, cpu / (run->count + kWarmup) * 1e6);
  } else if (!run->failed) {
    const double seconds = run->finished - run->started;
    const double gb = (double)run->bytes / 1e9;
    if (run->server_bytes != run->bytes) {
      fprintf(stderr, "stream-bench: the server counted %llu bytes of %llu\n", (unsigned long long)run->server_bytes,
              (unsigned long long)run->bytes);
      status = 1;
    }
    printf("stream-bench: %s throughput size=%zu bytes=%llu seconds=%.3f gbps=%.3f client_cpu_s_per_gb=%.3f "
           "server_cpu_s_per_gb=%.3f\n",
           transport, run->size, (unsigned long long)run->bytes, seconds, gb * 8 / seconds, cpu / gb,
           run->server_cpu / gb);
  }
  bufferevent_free(run->bev);
  free(run->chunk);
  free(run->round_times);
  return status;
}

static int usage(const char *program, FILE *to, int status) {
  fprintf(to,
          "usage: %s --server (--tcp | --rdma) ADDRESS PORT [--tls]\n"
          "       %s (--tcp | --rdma) ADDRESS PORT (--throughput | --latency | --verify) [--size N]\n"
          "          [--bytes N] [--count N] [--timeout SECONDS] [--seed N] [--poll USEC] [--copy] [--tls]\n"
          "          [--in-place]\n"
          "  A byte stream's throughput (--bytes in writes of --size, 64 KiB and 256 MiB by default) or\n"
          "  latency (ping-pong of --size bytes, --count times: 64 B, 10000), with CPU per GB, over\n"
          "  TCP or RDMA; or --verify: --bytes of random data in writes of random sizes echoed back\n"
          "  as they go, their SHA-256 compared (exit 1 if they differ). The server (PORT 0: any free\n"
          "  one, printed) serves runs until SIGINT. --poll USEC (RDMA, either side): after a completion,\n"
          "  poll for USEC microseconds before the loop sleeps (evrdma_base_set_polling_window).\n"
          "  --copy (RDMA, either side): copy what this side receives into its input evbuffer instead\n"
          "  of lending it the receive buffers (lend_from = SIZE_MAX), to compare.\n"
          "  --tls (both sides): TLS over the transport, libevent's OpenSSL filter on the bufferevent;\n"
          "  the server makes a self-signed certificate at start, the client does not verify it.\n"
          "  --in-place (RDMA, either side): evrdma_use_registered_memory() first, so this side sends\n"
          "  what it writes straight from its evbuffer chains, without copying them into send buffers.\n",
          program, program);
  return status;
}

int main(int argc, char **argv) {
  const char *host = NULL, *port = NULL;
  int server = 0, rdma = -1, mode = -1;
  long size = -1, count = 10000, timeout = 300, poll = 0;
  int copy = 0, tls = 0, in_place = 0;
  unsigned long long bytes = 256ull << 20, seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(argv[0], stdout, 0);
    if (strcmp(argv[i], "--server") == 0) server = 1;
    else if (strcmp(argv[i], "--tcp") == 0) rdma = 0;
    else if (strcmp(argv[i], "--rdma") == 0) rdma = 1;
    else if (strcmp(argv[i], "--throughput") == 0) mode = 0;
    else if (strcmp(argv[i], "--latency") == 0) mode = 1;
    else if (strcmp(argv[i], "--verify") == 0) mode = 2;
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) size = atol(argv[++i]);
    else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) bytes = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) count = atol(argv[++i]);
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) timeout = atol(argv[++i]);
    else if (strcmp(argv[i], "--poll") == 0 && i + 1 < argc) poll = atol(argv[++i]);
    else if (strcmp(argv[i], "--copy") == 0) copy = 1;
    else if (strcmp(argv[i], "--tls") == 0) tls = 1;
    else if (strcmp(argv[i], "--in-place") == 0) in_place = 1;
    else if (argv[i][0] != '-' && host == NULL) host = argv[i];
    else if (argv[i][0] != '-' && port == NULL) port = argv[i];
    else return usage(argv[0], stderr, 2);
  }
  if (rdma < 0 || host == NULL || port == NULL || (!server && mode < 0) || count <= 0 || timeout <= 0 || bytes == 0 ||
      size == 0 || size < -1 || poll < 0 || (poll > 0 && !rdma) ||
      ((copy || in_place) && !rdma))
    return usage(argv[0], stderr, 2);
  if (size < 0) size = mode == 1 ? 64 : 64 << 10;
  struct sockaddr_storage address;
  int length = 0;
  const int parsed = address_parse(host, port, &address, &length);
  if (parsed != 0) {
    fprintf(stderr, "stream-bench: %s port %s: %s\n", host, port, address_error(parsed));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  if (in_place && evrdma_use_registered_memory() != 0) {  /* first: before libevent allocates */
    fprintf(stderr, "stream-bench: evrdma_use_registered_memory failed\n");
    return 1;
  }
  struct event_base *base = event_base_new();
  struct evrdma_base *rbase = rdma ? evrdma_base_new(base) : NULL;
  if (base == NULL || (rdma && rbase == NULL)) {
    fprintf(stderr, "stream-bench: no event_base or evrdma_base: %s\n", strerror(errno));
    return 1;
  }
  if (rbase != NULL) evrdma_base_set_polling_window(rbase, (unsigned)poll);
  SSL_CTX *tls_context = !tls ? NULL : server ? tls_server_context("stream-bench") : tls_client_context();
  if (tls && tls_context == NULL) return 1;
  struct evrdma_stream_options options;
  evrdma_stream_options_init(&options);
  if (copy) options.lend_from = SIZE_MAX;
  int status;
  if (server) {
    status = run_server(base, rbase, rdma, tls_context, host, (struct sockaddr *)&address, length, &options);
  } else {
    struct run run;
    memset(&run, 0, sizeof run);
    run.base = base;
    run.rdma = rdma;
    run.tls = tls_context;
    run.latency = mode == 1;
    run.verify = mode == 2;
    run.random = seed * 0x9e3779b97f4a7c15ull + 1;
    run.size = (size_t)size;
    run.bytes = bytes;
    run.count = count;
    status = run_client(&run, rbase, host, (struct sockaddr *)&address, length, timeout, &options);
  }
  if (rbase != NULL) evrdma_base_free(rbase);
  event_base_free(base);
  if (tls_context != NULL) SSL_CTX_free(tls_context);
  return status;
}
