/* Options and the features a program stacks on a bufferevent; each case the same steps on TCP and
 * on an evrdma stream, or the difference docs/streams.md states. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"

/* What a bufferevent says of itself: its base is the program's on both; a stream has no file
 * descriptor (bufferevent_getfd -1, bufferevent_setfd refused), refuses a priority as libevent
 * refuses one on every bufferevent that is not a socket's, and its underlying bufferevent is
 * evrdma's own (docs/streams.md). */
static void a_stream_tells_its_base_and_has_no_fd_and_no_priority(enum transport t) {
  struct link link;
  struct seen client, server;
  if (begin(t, &link, &client, &server) != 0) return;
  check("bufferevent_get_base: the program's base", t,
        bufferevent_get_base(link.client) == base && bufferevent_get_base(link.server) == base);
  if (t == TCP) {
    check("bufferevent_getfd: the socket", t, bufferevent_getfd(link.client) >= 0 && bufferevent_getfd(link.server) >= 0);
    check("bufferevent_priority_set: taken", t, bufferevent_priority_set(link.client, 0) == 0);
    check("bufferevent_get_underlying: none", t, bufferevent_get_underlying(link.client) == NULL);
  } else {
    check("bufferevent_getfd: -1", t, bufferevent_getfd(link.client) == -1 && bufferevent_getfd(link.server) == -1);
    check("bufferevent_setfd: refused", t, bufferevent_setfd(link.client, 0) == -1);
    check("bufferevent_priority_set: refused", t, bufferevent_priority_set(link.client, 0) == -1);
    check("bufferevent_get_underlying: evrdma's own", t, bufferevent_get_underlying(link.client) != NULL);
  }
  finish(&link, &client, &server);
}

/* A read rate limit bounds what each read callback finds, as the high watermark does: 20 000
 * bytes reach a reader allowed 2 000 per tick in callbacks that each find at most 2 000, intact.
 * The same with the reader in a rate-limit group. */
static void a_read_rate_limit_bounds_what_each_read_callback_finds(enum transport t) {
  settle_libevent_clock();
  enum { kBytes = 20000, kPerTick = 2000 };
  static unsigned char data[kBytes];
  const struct timeval tick = {0, 20000};
  struct ev_token_bucket_cfg* cfg = ev_token_bucket_cfg_new(kPerTick, kPerTick, EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, &tick);
  struct bufferevent_rate_limit_group* group;
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, kBytes}, twice = {&server, 2 * kBytes};
  if (cfg == NULL || begin(t, &link, &client, &server) != 0) {
    if (cfg != NULL) ev_token_bucket_cfg_free(cfg);
    return;
  }
  fill(data, kBytes, 11);
  check("bufferevent_set_rate_limit: taken", t, bufferevent_set_rate_limit(link.server, cfg) == 0);
  bufferevent_write(link.client, data, kBytes);
  check("every byte arrives", t, run_until(has_bytes, &all, 60));
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  check("no read callback found more than a tick's allowance", t, server.most_found <= kPerTick);
  bufferevent_set_rate_limit(link.server, NULL);
  group = bufferevent_rate_limit_group_new(base, cfg);
  server.most_found = 0;
  check("bufferevent_add_to_rate_limit_group: taken", t,
        group != NULL && bufferevent_add_to_rate_limit_group(link.server, group) == 0);
  bufferevent_write(link.client, data, kBytes);
  check("in a group, every byte arrives", t, run_until(has_bytes, &twice, 60));
  check("no read callback found more than the group's allowance", t, server.most_found <= kPerTick);
  bufferevent_remove_from_rate_limit_group(link.server);
  finish(&link, &client, &server);
  if (group != NULL) bufferevent_rate_limit_group_free(group);
  ev_token_bucket_cfg_free(cfg);
}

/* Two links whose readers (the server's ends) or writers (the client's ends) are in one new
 * rate-limit group of `cfg`, `*group`: how many links opened (2, or fewer and a failed check). */
static int two_links_in_a_group(enum transport t, const struct ev_token_bucket_cfg* cfg, int writers,
                                struct bufferevent_rate_limit_group** group, struct link link[2],
                                struct seen client[2], struct seen server[2]) {
  int opened = 0;
  settle_libevent_clock();
  *group = cfg != NULL ? bufferevent_rate_limit_group_new(base, cfg) : NULL;
  if (*group != NULL && begin(t, &link[0], &client[0], &server[0]) == 0) {
    opened = 1;
    if (begin(t, &link[1], &client[1], &server[1]) == 0) opened = 2;
  }
  check("two links in one group", t, opened == 2);
  for (int i = 0; opened == 2 && i < 2; ++i)
    check("bufferevent_add_to_rate_limit_group: taken", t,
          bufferevent_add_to_rate_limit_group(writers ? link[i].client : link[i].server, *group) == 0);
  return opened;
}
/* Their end: out of the group, the links finished, the group and `cfg` freed. */
static void two_links_end(int opened, struct bufferevent_rate_limit_group* group, struct ev_token_bucket_cfg* cfg,
                          struct link link[2], struct seen client[2], struct seen server[2]) {
  for (int i = 0; i < opened; ++i) {
    bufferevent_remove_from_rate_limit_group(link[i].client);
    bufferevent_remove_from_rate_limit_group(link[i].server);
    finish(&link[i], &client[i], &server[i]);
  }
  if (group != NULL) bufferevent_rate_limit_group_free(group);
  if (cfg != NULL) ev_token_bucket_cfg_free(cfg);
}

/* Two readers in one rate-limit group share its bucket: 20 000 bytes to each, at once, reach them
 * in callbacks that each find at most a reader's share of the group's tick allowance (libevent
 * divides it by the members), every byte intact on both, and neither waits for the other: when
 * the first has all its bytes, the second has at least a third of its own (TCP: 13 000-20 000 in runs). */
struct two_readers {
  struct wait_bytes first, second;
  size_t other_had; /* what the other had read when one had all */
};
static int either_has_all(void* arg) {
  struct two_readers* readers = arg;
  const int first = has_bytes(&readers->first), second = has_bytes(&readers->second);
  if (first || second) readers->other_had = evbuffer_get_length((first ? readers->second : readers->first).seen->bytes);
  return first || second;
}
static void two_readers_in_one_rate_limit_group_share_its_allowance(enum transport t) {
  enum { kBytes = 20000, kPerTick = 2000, kShare = kPerTick / 2 };
  static unsigned char data[2][kBytes];
  const struct timeval tick = {0, 20000};
  struct ev_token_bucket_cfg* cfg = ev_token_bucket_cfg_new(kPerTick, kPerTick, EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, &tick);
  struct bufferevent_rate_limit_group* group;
  struct link link[2];
  struct seen client[2], server[2];
  struct two_readers readers = {{&server[0], kBytes}, {&server[1], kBytes}, 0};
  const int opened = two_links_in_a_group(t, cfg, 0, &group, link, client, server);
  if (opened == 2) {
    fill(data[0], kBytes, 20);
    fill(data[1], kBytes, 21);
    bufferevent_write(link[0].client, data[0], kBytes);
    bufferevent_write(link[1].client, data[1], kBytes);
    check("one reader has every byte", t, run_until(either_has_all, &readers, 60));
    printf("  (%s: the other had %zu of %d)\n", transport_names[t], readers.other_had, kBytes);
    check("the other had a third of its bytes by then: neither waits for the other", t, readers.other_had >= kBytes / 3);
    check("every byte arrives at both", t,
          run_until(has_bytes, &readers.first, 60) && run_until(has_bytes, &readers.second, 60));
    check("intact and in order at both", t,
          read_exactly(&server[0], data[0], kBytes) && read_exactly(&server[1], data[1], kBytes));
    printf("  (%s: the most one read callback found: %zu and %zu)\n", transport_names[t], server[0].most_found,
           server[1].most_found);
    check("no read callback of either found more than a reader's share", t,
          server[0].most_found <= kShare && server[1].most_found <= kShare);
  }
  two_links_end(opened, group, cfg, link, client, server);
}

struct charged {
  struct bufferevent* end;
};
static int write_bucket_spent(void* arg) {
  return bufferevent_get_write_limit(((const struct charged*)arg)->end) <= 0;
}

/* A write rate limit holds the rest of a write back: 20 000 bytes written at once by a writer
 * allowed 2 000 per (10 s) tick; once its bucket is spent, its output still holds all but 2 000;
 * the limit lifted, every byte arrives, intact. (The tick outlasts any loop pass, so no refill
 * comes between the spend and the look.) */
static void a_write_rate_limit_holds_back_what_its_bucket_does_not_allow(enum transport t) {
  settle_libevent_clock();
  enum { kBytes = 20000, kPerTick = 2000 };
  static unsigned char data[kBytes];
  const struct timeval tick = {10, 0};
  struct ev_token_bucket_cfg* cfg = ev_token_bucket_cfg_new(EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, kPerTick, kPerTick, &tick);
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, kBytes};
  struct charged charged;
  if (cfg == NULL || begin(t, &link, &client, &server) != 0) {
    if (cfg != NULL) ev_token_bucket_cfg_free(cfg);
    return;
  }
  fill(data, kBytes, 13);
  check("bufferevent_set_rate_limit: taken", t, bufferevent_set_rate_limit(link.client, cfg) == 0);
  charged.end = link.client;
  bufferevent_write(link.client, data, kBytes);
  check("the writer's bucket is spent", t, run_until(write_bucket_spent, &charged, 30));
  check("with all but a bucket's worth still in its output", t,
        evbuffer_get_length(bufferevent_get_output(link.client)) >= kBytes - kPerTick);
  bufferevent_set_rate_limit(link.client, NULL); /* writing resumes at once */
  check("the limit lifted, every byte arrives", t, run_until(has_bytes, &all, 60));
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  finish(&link, &client, &server);
  ev_token_bucket_cfg_free(cfg);
}

static int group_write_bucket_spent(void* arg) {
  return bufferevent_rate_limit_group_get_write_limit(arg) <= 0;
}

/* Two writers in one rate-limit group share its bucket, each writing at most its share per loop
 * pass as a socket does: 20 000 bytes written by each at once, a group allowing 2 000 per (10 s)
 * tick; once the group's bucket is spent, both have sent some of their bytes (neither took the
 * whole bucket), and together no more than the bucket and a minimum share (64) beyond it. Out of
 * the group, every byte arrives at both peers, intact. */
static void two_writers_in_one_rate_limit_group_share_its_allowance(enum transport t) {
  enum { kBytes = 20000, kPerTick = 2000, kMinShare = 64 };
  static unsigned char data[2][kBytes];
  const struct timeval tick = {10, 0};
  struct ev_token_bucket_cfg* cfg = ev_token_bucket_cfg_new(EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, kPerTick, kPerTick, &tick);
  struct bufferevent_rate_limit_group* group;
  struct link link[2];
  struct seen client[2], server[2];
  struct wait_bytes first = {&server[0], kBytes}, second = {&server[1], kBytes};
  const int opened = two_links_in_a_group(t, cfg, 1, &group, link, client, server);
  if (opened == 2) {
    size_t sent[2];
    fill(data[0], kBytes, 30);
    fill(data[1], kBytes, 31);
    bufferevent_write(link[0].client, data[0], kBytes);
    bufferevent_write(link[1].client, data[1], kBytes);
    check("the group's bucket is spent", t, run_until(group_write_bucket_spent, group, 30));
    for (int i = 0; i < 2; ++i) sent[i] = kBytes - evbuffer_get_length(bufferevent_get_output(link[i].client));
    printf("  (%s: sent %zu and %zu when the bucket was spent)\n", transport_names[t], sent[0], sent[1]);
    check("both writers sent some: neither took the whole bucket", t, sent[0] > 0 && sent[1] > 0);
    check("together no more than the bucket and a minimum share", t, sent[0] + sent[1] <= kPerTick + kMinShare);
    for (int i = 0; i < 2; ++i) bufferevent_remove_from_rate_limit_group(link[i].client); /* writing resumes */
    check("out of the group, every byte arrives at both", t,
          run_until(has_bytes, &first, 60) && run_until(has_bytes, &second, 60));
    check("intact and in order at both", t,
          read_exactly(&server[0], data[0], kBytes) && read_exactly(&server[1], data[1], kBytes));
  }
  two_links_end(opened, group, cfg, link, client, server);
}

static int cleaned;
static void clean_up(const void* data, size_t length, void* arg) {
  (void)data;
  (void)length;
  (void)arg;
  ++cleaned;
}

/* A file (evbuffer_add_file) and memory by reference (evbuffer_add_reference) in the output go
 * out intact; the reference's cleanup runs once its bytes have left the output. */
static void a_file_and_a_reference_in_the_output_arrive_intact(enum transport t) {
  enum { kFile = 300000, kReference = 50000 };
  static unsigned char data[kFile + kReference];
  char path[] = "/tmp/evrdma-conformance-XXXXXX";
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, kFile + kReference};
  int fd = mkstemp(path);
  if (fd < 0 || begin(t, &link, &client, &server) != 0) {
    check("a file to send", t, fd >= 0);
    if (fd >= 0) close(fd);
    return;
  }
  unlink(path);
  fill(data, sizeof data, 12);
  check("the file is written", t, write(fd, data, kFile) == kFile);
  cleaned = 0;
  check("evbuffer_add_file: taken", t, evbuffer_add_file(bufferevent_get_output(link.client), fd, 0, kFile) == 0);
  check("evbuffer_add_reference: taken", t,
        evbuffer_add_reference(bufferevent_get_output(link.client), data + kFile, kReference, clean_up, NULL) == 0);
  check("every byte arrives", t, run_until(has_bytes, &all, 60));
  check("intact and in order, the file's first", t, read_exactly(&server, data, kFile + kReference));
  check("the client's write callback runs", t, run_until(has_written, &client, 30));
  check("the reference was cleaned up, once", t, cleaned == 1);
  finish(&link, &client, &server);
}

/* ---- Listeners: one of the case's own over either transport, its accepts counted. */

struct listener {
  enum transport transport;
  struct evconnlistener* tcp;
  struct evrdma_listener* rdma;
  int accepts;
  struct bufferevent* last; /* the last accepted end */
};

static void take_accepted(struct listener* listener, struct bufferevent* bev) {
  ++listener->accepts;
  if (listener->last != NULL) bufferevent_free(listener->last);
  listener->last = bev;
}
static void count_tcp_accept(struct evconnlistener* l, evutil_socket_t fd, struct sockaddr* peer, int socklen,
                             void* arg) {
  (void)l;
  (void)peer;
  (void)socklen;
  take_accepted(arg, bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE));
}
static void count_rdma_accept(struct evrdma_listener* l, struct bufferevent* bev, const struct sockaddr* peer,
                              int socklen, void* arg) {
  (void)l;
  (void)peer;
  (void)socklen;
  take_accepted(arg, bev);
}

/* Listens at `at` with `flags`: 0, or -1 with errno set (what the listener's maker said). */
static int listen_at(enum transport t, struct listener* listener, struct sockaddr_in* at, unsigned flags) {
  memset(listener, 0, sizeof *listener);
  listener->transport = t;
  if (t == TCP) {
    listener->tcp = evconnlistener_new_bind(base, count_tcp_accept, listener, flags, 16, (struct sockaddr*)at, sizeof *at);
    if (listener->tcp == NULL) return -1;
    {
      socklen_t length = sizeof *at;
      getsockname(evconnlistener_get_fd(listener->tcp), (struct sockaddr*)at, &length);
    }
  } else {
    listener->rdma = evrdma_listener_new_bind(rbase, count_rdma_accept, listener, flags, 16, (struct sockaddr*)at,
                                              sizeof *at, NULL);
    if (listener->rdma == NULL) return -1;
    at->sin_port = htons(evrdma_listener_get_port(listener->rdma));
  }
  return 0;
}
static void unlisten(struct listener* listener) {
  if (listener->tcp != NULL) evconnlistener_free(listener->tcp);
  if (listener->rdma != NULL) evrdma_listener_free(listener->rdma);
  listener->tcp = NULL;
  listener->rdma = NULL;
}
static void drop_accepted(struct listener* listener) {
  if (listener->last != NULL) bufferevent_free(listener->last);
  listener->last = NULL;
}

/* A client's end connecting to `at`, watched by `seen`. */
static struct bufferevent* connect_to(enum transport t, const struct sockaddr_in* at, struct seen* seen) {
  struct bufferevent* bev;
  if (t == TCP) {
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    watch(bev, seen);
    if (bufferevent_socket_connect(bev, (const struct sockaddr*)at, sizeof *at) != 0) seen->events = -1;
  } else {
    bev = evrdma_bufferevent_connect(rbase, (const struct sockaddr*)at, sizeof *at, NULL);
    if (bev != NULL) watch(bev, seen);
  }
  return bev;
}
static int was_accepted(void* arg) { return ((const struct listener*)arg)->accepts > 0; }
/* Frees a client's end connect_to made (if it did) and what its watcher read. */
static void hang_up(struct bufferevent* bev, struct seen* seen) {
  if (bev == NULL) return;
  bufferevent_free(bev);
  evbuffer_free(seen->bytes);
}
/* A case's own listener at the test bed's address, on a port of its own; -1 and a failed check
 * (`what`) if it could not listen. */
static int listen_anew(enum transport t, struct listener* listener, struct sockaddr_in* at, unsigned flags,
                       const char* what) {
  *at = listener_address(t);
  at->sin_port = 0;
  if (listen_at(t, listener, at, flags) == 0) return 0;
  check(what, t, 0);
  return -1;
}

/* Each LEV_OPT_* flag is taken or refused by name: a socket listener takes them all; a stream
 * listener takes those it honours or always does, and refuses LEV_OPT_THREADSAFE and
 * LEV_OPT_REUSEABLE_PORT with EOPNOTSUPP (docs/streams.md); an unknown flag is EINVAL. */
static void each_listener_flag_is_taken_or_refused_by_name(enum transport t) {
  static const unsigned flags[] = {LEV_OPT_LEAVE_SOCKETS_BLOCKING, LEV_OPT_CLOSE_ON_FREE, LEV_OPT_CLOSE_ON_EXEC,
                                   LEV_OPT_REUSEABLE, LEV_OPT_THREADSAFE, LEV_OPT_DISABLED,
                                   LEV_OPT_DEFERRED_ACCEPT, LEV_OPT_REUSEABLE_PORT};
  static const char* const names[] = {"LEAVE_SOCKETS_BLOCKING", "CLOSE_ON_FREE", "CLOSE_ON_EXEC", "REUSEABLE",
                                      "THREADSAFE", "DISABLED", "DEFERRED_ACCEPT", "REUSEABLE_PORT"};
  size_t i;
  char what[96];
  for (i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    struct sockaddr_in at = listener_address(t);
    struct listener listener;
    const int refused = t == RDMA && (flags[i] == LEV_OPT_THREADSAFE || flags[i] == LEV_OPT_REUSEABLE_PORT);
    int rc;
    at.sin_port = 0; /* listen_anew's check would count the refusals as failures */
    errno = 0;
    rc = listen_at(t, &listener, &at, flags[i]);
    snprintf(what, sizeof what, "LEV_OPT_%s: %s", names[i], refused ? "refused, EOPNOTSUPP" : "taken");
    check(what, t, refused ? rc == -1 && errno == EOPNOTSUPP : rc == 0);
    unlisten(&listener);
  }
  if (t == RDMA) {
    struct sockaddr_in at = listener_address(t);
    struct listener listener;
    at.sin_port = 0;
    errno = 0;
    check("an unknown flag: EINVAL", t, listen_at(t, &listener, &at, 1u << 20) == -1 && errno == EINVAL);
    unlisten(&listener);
  }
}

/* LEV_OPT_DISABLED: the listener hands out nothing until enabled; then it takes connections. A
 * socket's kernel meanwhile completes the client's connect and holds it in the backlog; a stream
 * listener refuses it (ECONNREFUSED), as a disabled one does (docs/streams.md). */
static void a_listener_made_disabled_takes_connections_once_enabled(enum transport t) {
  struct sockaddr_in at;
  struct listener listener;
  struct seen early, late;
  struct bufferevent *first, *second;
  if (listen_anew(t, &listener, &at, LEV_OPT_DISABLED | LEV_OPT_CLOSE_ON_FREE, "a listener made disabled") != 0) return;
  first = connect_to(t, &at, &early);
  check("a connect to it ends in an event", t, first != NULL && run_until(has_event, &early, 30));
  if (t == TCP)
    check("CONNECTED (the kernel's backlog), and nothing handed out", t,
          early.event[0] == BEV_EVENT_CONNECTED && listener.accepts == 0);
  else
    check("ERROR, ECONNREFUSED, and nothing handed out", t,
          early.event[0] == BEV_EVENT_ERROR && early.error[0] == ECONNREFUSED && listener.accepts == 0);
  if (t == TCP)
    evconnlistener_enable(listener.tcp);
  else
    evrdma_listener_enable(listener.rdma);
  second = connect_to(t, &at, &late);
  check("enabled, it hands out connections", t, second != NULL && run_until(was_accepted, &listener, 30));
  hang_up(first, &early);
  hang_up(second, &late);
  drop_accepted(&listener);
  unlisten(&listener);
}

/* LEV_OPT_REUSEABLE: a listener freed while a connection it accepted lives on can be made again
 * on the same port with it, and that new one takes connections. Without it a socket's port is in
 * use (EADDRINUSE); the RDMA CM holds no port for the connections a listener accepted, so a stream
 * listener may listen there again with or without it (docs/streams.md). */
static void a_port_with_a_live_connection_is_listened_on_again_when_reuseable(enum transport t) {
  struct sockaddr_in at;
  struct listener first, again;
  struct seen client, next;
  struct bufferevent *bev, *bev2 = NULL;
  if (listen_anew(t, &first, &at, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE, "a reuseable listener") != 0) return;
  bev = connect_to(t, &at, &client);
  check("it takes a connection", t, bev != NULL && run_until(was_accepted, &first, 30));
  unlisten(&first); /* the accepted end lives on */
  errno = 0;
  if (t == TCP)
    check("without LEV_OPT_REUSEABLE, listening on its port again: EADDRINUSE", t,
          listen_at(t, &again, &at, LEV_OPT_CLOSE_ON_FREE) == -1 && errno == EADDRINUSE);
  else
    check("without LEV_OPT_REUSEABLE, listening on its port again works too", t,
          listen_at(t, &again, &at, LEV_OPT_CLOSE_ON_FREE) == 0);
  unlisten(&again);
  check("with it, listening there again works", t, listen_at(t, &again, &at, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE) == 0);
  if (again.tcp != NULL || again.rdma != NULL) {
    bev2 = connect_to(t, &at, &next);
    check("and the new listener takes connections", t, bev2 != NULL && run_until(was_accepted, &again, 30));
  }
  hang_up(bev2, &next);
  hang_up(bev, &client);
  drop_accepted(&first);
  drop_accepted(&again);
  unlisten(&again);
}

/* Whether a program exec'd now inherits a descriptor that is not a socket's or a standard one
 * (RDMA devices, event and completion channels): 1 if none, 0 if some, -1 if it could not tell. */
static int an_exec_inherits_no_event_or_device_descriptor(void) {
  int out[2], status = 0, clean = 1;
  char line[512];
  FILE* list;
  pid_t pid;
  if (pipe(out) != 0) return -1;
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    execl("/bin/sh", "sh", "-c", "for f in /proc/$$/fd/*; do readlink \"$f\"; done", (char*)NULL);
    _exit(127);
  }
  close(out[1]);
  list = fdopen(out[0], "r");
  while (list != NULL && fgets(line, sizeof line, list) != NULL) {
    if (strstr(line, "infiniband") != NULL || strstr(line, "anon_inode") != NULL || strstr(line, "rdma") != NULL) {
      printf("  inherited: %s", line);
      clean = 0;
    }
  }
  if (list != NULL) fclose(list);
  waitpid(pid, &status, 0);
  return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? clean : -1;
}

/* LEV_OPT_CLOSE_ON_EXEC, always: with a listener and a link open, a program exec'd inherits no
 * device, event or completion-channel descriptor. */
static void an_execed_program_inherits_no_descriptor_of_the_listeners_or_the_streams(enum transport t) {
  struct link link;
  struct seen client, server;
  if (begin(t, &link, &client, &server) != 0) return;
  check("an exec'd program inherits none", t, an_exec_inherits_no_event_or_device_descriptor() == 1);
  finish(&link, &client, &server);
}

static int read_callbacks;
static void count_read(struct bufferevent* bev, void* arg) {
  (void)bev;
  (void)arg;
  ++read_callbacks;
}
static int a_read_callback_ran(void* arg) {
  (void)arg;
  return read_callbacks > 0;
}

/* The BEV_OPT_* options a connect takes: CLOSE_ON_FREE, DEFER_CALLBACKS and UNLOCK_CALLBACKS are
 * taken (a stream's callbacks are deferred always: a read callback triggered on an end made
 * without DEFER_CALLBACKS runs inside the trigger on a socket's, on the loop on a stream's);
 * THREADSAFE is refused with EOPNOTSUPP, an unknown option with EINVAL (docs/streams.md). */
static void each_connect_option_is_taken_or_refused_by_name(enum transport t) {
  static const int taken[] = {BEV_OPT_CLOSE_ON_FREE, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS,
                              BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS | BEV_OPT_UNLOCK_CALLBACKS};
  struct sockaddr_in to = listener_address(t);
  struct evrdma_stream_options options;
  struct bufferevent* bev;
  size_t i;
  evrdma_stream_options_init(&options);
  for (i = 0; i < sizeof taken / sizeof taken[0]; ++i) {
    options.bev_options = taken[i];
    bev = t == TCP ? bufferevent_socket_new(base, -1, taken[i])
                   : evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, &options);
    check("CLOSE_ON_FREE, DEFER_CALLBACKS, UNLOCK_CALLBACKS: taken", t, bev != NULL);
    if (bev != NULL) bufferevent_free(bev);
  }
  if (t == RDMA) {
    options.bev_options = BEV_OPT_THREADSAFE;
    errno = 0;
    check("BEV_OPT_THREADSAFE: refused, EOPNOTSUPP", t,
          evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, &options) == NULL && errno == EOPNOTSUPP);
    options.bev_options = 1 << 20;
    errno = 0;
    check("an unknown option: EINVAL", t,
          evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, &options) == NULL && errno == EINVAL);
  }
  /* Without DEFER_CALLBACKS, where the read callback runs when triggered. */
  options.bev_options = 0;
  bev = t == TCP ? bufferevent_socket_new(base, -1, 0)
                 : evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, &options);
  if (bev == NULL) {
    check("an end without options", t, 0);
    return;
  }
  read_callbacks = 0;
  bufferevent_setcb(bev, count_read, NULL, NULL, NULL);
  bufferevent_trigger(bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
  if (t == TCP)
    check("a triggered read callback runs inside the trigger", t, read_callbacks == 1);
  else
    check("a triggered read callback runs on the loop, not inside the trigger", t,
          read_callbacks == 0 && run_until(a_read_callback_ran, NULL, 30));
  bufferevent_free(bev);
}

const struct test_case options_cases[] = {
    CASE(a_stream_tells_its_base_and_has_no_fd_and_no_priority),
    CASE(a_read_rate_limit_bounds_what_each_read_callback_finds),
    CASE(two_readers_in_one_rate_limit_group_share_its_allowance),
    CASE(a_write_rate_limit_holds_back_what_its_bucket_does_not_allow),
    CASE(two_writers_in_one_rate_limit_group_share_its_allowance),
    CASE(a_file_and_a_reference_in_the_output_arrive_intact),
    CASE(each_connect_option_is_taken_or_refused_by_name),
    CASE(each_listener_flag_is_taken_or_refused_by_name),
    CASE(a_listener_made_disabled_takes_connections_once_enabled),
    CASE(a_port_with_a_live_connection_is_listened_on_again_when_reuseable),
    CASE(an_execed_program_inherits_no_descriptor_of_the_listeners_or_the_streams),
    CASES_END,
};
