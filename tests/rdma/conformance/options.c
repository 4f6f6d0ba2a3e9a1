/* Options and the features a program stacks on a bufferevent; each case the same steps on TCP and
 * on an evrdma stream, or the difference docs/streams.md states. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

struct charged {
  struct bufferevent* end;
};
static int write_bucket_spent(void* arg) {
  return bufferevent_get_write_limit(((const struct charged*)arg)->end) <= 0;
}

/* A write rate limit holds the rest of a write back: 20 000 bytes written at once by a writer
 * allowed 2 000 per tick; once its bucket is spent, its output still holds all but 2 000, and in
 * the end every byte arrives, intact. */
static void a_write_rate_limit_holds_back_what_its_bucket_does_not_allow(enum transport t) {
  enum { kBytes = 20000, kPerTick = 2000 };
  static unsigned char data[kBytes];
  const struct timeval tick = {0, 50000};
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
  check("every byte arrives", t, run_until(has_bytes, &all, 60));
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  finish(&link, &client, &server);
  ev_token_bucket_cfg_free(cfg);
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

const struct test_case options_cases[] = {
    CASE(a_stream_tells_its_base_and_has_no_fd_and_no_priority),
    CASE(a_read_rate_limit_bounds_what_each_read_callback_finds),
    CASE(a_write_rate_limit_holds_back_what_its_bucket_does_not_allow),
    CASE(a_file_and_a_reference_in_the_output_arrive_intact),
    CASES_END,
};
