/* The ends' lives: enabling and disabling with bytes pending, flushing, freeing from inside each
 * callback, EOF and errors; each case the same steps on TCP and on an evrdma stream. */
#include <arpa/inet.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"

static void free_on_read(struct bufferevent* bev, struct seen* seen) {
  seen->freed = 1;
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
  finish(&link, &client, &server);
}

/* Bytes that arrive while reading is disabled wait, with no read callback; reading enabled again,
 * they all come, in one or more callbacks. */
static void bytes_arriving_while_reading_is_disabled_come_once_it_is_enabled(enum transport t) {
  enum { kBytes = 3000 };
  unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes pong = {&client, 1}, all = {&server, kBytes};
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 6);
  bufferevent_disable(link.server, EV_READ);
  bufferevent_write(link.client, data, kBytes);
  check("the client's bytes leave it", t, run_until(has_written, &client, 30));
  bufferevent_write(link.server, "p", 1); /* its bytes had a round trip's time to arrive */
  check("the server's answer reaches the client", t, run_until(has_bytes, &pong, 30));
  check("the server, not reading, has had no read callback", t, server.reads == 0);
  bufferevent_enable(link.server, EV_READ);
  check("reading enabled, every byte comes", t, run_until(has_bytes, &all, 30));
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  finish(&link, &client, &server);
}

static size_t read_at_eof; /* what the server had read when its EOF came */
static void note_what_was_read_at_eof(struct bufferevent* bev, struct seen* seen, short what) {
  if (what & BEV_EVENT_EOF) read_at_eof = evbuffer_get_length(seen->bytes) + evbuffer_get_length(bufferevent_get_input(bev));
}

static void shut_down_writing(struct link* link);

/* A half-close that arrives while reading is disabled waits behind the bytes before it: no event
 * while reading is disabled; reading enabled, every byte comes, then EOF (a program that stops
 * reading for back-pressure must not hear EOF, and end its side, with bytes still to come). */
static void an_eof_arriving_while_reading_is_disabled_comes_after_every_byte_once_it_is_enabled(enum transport t) {
  enum { kBytes = 200000 };
  static unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes pong = {&client, 1};
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 11);
  read_at_eof = 0;
  server.on_event = note_what_was_read_at_eof;
  bufferevent_disable(link.server, EV_READ);
  bufferevent_setwatermark(link.client, EV_WRITE, 0, 0);
  bufferevent_write(link.client, data, kBytes);
  check("the client's bytes leave it", t, run_until(has_written, &client, 30));
  shut_down_writing(&link);
  bufferevent_write(link.server, "p", 1); /* the bytes and the half-close had a round trip to arrive */
  check("the server's answer reaches the client", t, run_until(has_bytes, &pong, 30));
  check("the server, not reading, has heard nothing", t, server.reads == 0 && server.events == 0);
  bufferevent_enable(link.server, EV_READ);
  check("reading enabled, EOF comes", t, run_until(has_event, &server, 30));
  check("EOF while reading, after every byte", t,
        server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING) && read_at_eof == kBytes);
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  finish(&link, &client, &server);
}

/* The same with the bytes already in the input, left there by the read callback: EOF waits until
 * reading is enabled again (a socket's end finds it only by reading). */
static void an_eof_behind_bytes_left_in_the_input_waits_until_reading_is_enabled(enum transport t) {
  struct link link;
  struct seen client, server;
  struct wait_bytes pong = {&client, 1};
  struct wait_input kept;
  if (begin(t, &link, &client, &server) != 0) return;
  server.keep = 1;
  kept.end = link.server;
  kept.at_least = 10;
  bufferevent_setwatermark(link.client, EV_WRITE, 0, 0);
  bufferevent_write(link.client, "0123456789", 10);
  check("the bytes wait in the server's input", t, run_until(input_has, &kept, 30));
  bufferevent_disable(link.server, EV_READ);
  shut_down_writing(&link);
  bufferevent_write(link.server, "p", 1); /* the half-close had a round trip to arrive */
  check("the server's answer reaches the client", t, run_until(has_bytes, &pong, 30));
  check("the server, not reading, has heard no event", t, server.events == 0);
  bufferevent_enable(link.server, EV_READ);
  check("reading enabled, EOF comes", t, run_until(has_event, &server, 30));
  check("EOF while reading", t, server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING));
  finish(&link, &client, &server);
}

static void resume_reading(evutil_socket_t fd, short what, void* arg) {
  (void)fd;
  (void)what;
  bufferevent_enable(arg, EV_READ);
}
static struct event* resume; /* resume_reading on a later turn */
static void pause_reading_until_the_next_turn(struct bufferevent* bev, struct seen* seen) {
  const struct timeval now = {0, 0};
  (void)seen;
  bufferevent_disable(bev, EV_READ);
  evtimer_add(resume, &now);
}

/* A reader that pauses itself in each read callback (it drained its input, its sink is full) and
 * resumes on a later loop turn, under a read high watermark, gets every byte and then EOF: the
 * back-pressure of a proxy. (A stream once left what its pair held past the watermark unread
 * when reading was enabled again, and the reader waited for ever.) */
static void a_reader_that_pauses_in_each_read_callback_gets_every_byte_then_eof(enum transport t) {
  enum { kBytes = 400000 };
  static unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 12);
  read_at_eof = 0;
  server.on_event = note_what_was_read_at_eof;
  server.on_read = pause_reading_until_the_next_turn;
  resume = evtimer_new(base, resume_reading, link.server);
  bufferevent_setwatermark(link.server, EV_READ, 0, 20000);
  bufferevent_setwatermark(link.client, EV_WRITE, 0, 0);
  bufferevent_write(link.client, data, kBytes);
  check("the client's bytes leave it", t, run_until(has_written, &client, 30));
  shut_down_writing(&link); /* a socket's after its output went: else the bytes still there fail */
  check("EOF comes", t, run_until(has_event, &server, 30));
  check("EOF while reading, after every byte", t,
        server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING) && read_at_eof == kBytes);
  check("intact and in order", t, read_exactly(&server, data, kBytes));
  printf("  %d read callbacks\n", server.reads);
  event_free(resume);
  finish(&link, &client, &server);
}

struct flushes {
  int normal, flush, finished; /* what bufferevent_flush returned in each mode */
};

/* bufferevent_flush sends nothing while writing is disabled, in any mode (a socket's flush does
 * nothing); writing enabled, the bytes go; a flush with BEV_FINISHED ends nothing: bytes written
 * after it go too, and the peer hears no event. */
static void flushing_sends_nothing_while_writing_is_disabled_and_finishes_nothing(enum transport t) {
  enum { kBytes = 1000 };
  unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  struct wait_bytes one = {&client, 1}, first = {&server, 500}, all = {&server, kBytes};
  struct flushes flushed;
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 7);
  bufferevent_disable(link.client, EV_WRITE);
  bufferevent_write(link.client, data, 500);
  flushed.normal = bufferevent_flush(link.client, EV_WRITE, BEV_NORMAL);
  flushed.flush = bufferevent_flush(link.client, EV_WRITE, BEV_FLUSH);
  bufferevent_write(link.server, "x", 1); /* a pass of the client's loop that reads */
  check("the client reads while its writing is disabled", t, run_until(has_bytes, &one, 30));
  check("what it wrote and flushed meanwhile is still in its output", t, client.held_when_read == 500);
  check("no flush failed", t, flushed.normal >= 0 && flushed.flush >= 0);
  bufferevent_enable(link.client, EV_WRITE);
  check("writing enabled, the bytes go", t, run_until(has_bytes, &first, 30));
  bufferevent_write(link.client, data + 500, 300);
  flushed.finished = bufferevent_flush(link.client, EV_WRITE, BEV_FINISHED);
  bufferevent_write(link.client, data + 800, 200);
  check("bytes written after a flush with BEV_FINISHED go too", t, run_until(has_bytes, &all, 30));
  check("intact and in order", t, read_exactly(&server, data, kBytes) && flushed.finished >= 0);
  check("and the server heard no event", t, server.events == 0);
  finish(&link, &client, &server);
}

static void free_on_write(struct bufferevent* bev, struct seen* seen) {
  seen->freed = 1;
  bufferevent_free(bev);
}

/* An end freed from inside its write callback, its output drained: the peer reads every byte,
 * then EOF. */
static void an_end_freed_in_its_write_callback_gives_the_peer_every_byte_then_eof(enum transport t) {
  enum { kBytes = 100000 };
  static unsigned char data[kBytes];
  struct link link;
  struct seen client, server;
  if (begin(t, &link, &client, &server) != 0) return;
  fill(data, kBytes, 8);
  client.on_write = free_on_write;
  bufferevent_write(link.client, data, kBytes);
  check("the server hears an event", t, run_until(has_event, &server, 30));
  check("EOF while reading", t, server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING));
  check("after every byte, intact", t, read_exactly(&server, data, kBytes));
  finish(&link, &client, &server);
}

static void shut_down_writing(struct link* link) {
  if (link->transport == TCP)
    shutdown(bufferevent_getfd(link->client), SHUT_WR);
  else
    evrdma_bufferevent_shutdown_write(link->client);
}

static void answer_and_free_on_eof(struct bufferevent* bev, struct seen* seen, short what) {
  if (!(what & BEV_EVENT_EOF)) return;
  bufferevent_write(bev, "bye", 3);
  seen->freed = 1;
  bufferevent_free(bev);
}

/* A half-close: the server reads every byte, then EOF, and frees its end from inside that event
 * callback; the client then reads EOF. What the server wrote just before it freed its end: a
 * socket's bufferevent drops it (libevent closes the socket with the bytes still in its output
 * evbuffer), a stream sends it (docs/streams.md: freeing sends what was written). */
static void an_end_freed_in_its_eof_callback_gives_the_peer_eof(enum transport t) {
  static const unsigned char data[] = "0123456789";
  struct link link;
  struct seen client, server;
  struct wait_bytes all = {&server, 10};
  if (begin(t, &link, &client, &server) != 0) return;
  server.on_event = answer_and_free_on_eof;
  bufferevent_write(link.client, data, 10);
  check("the server reads the bytes", t, run_until(has_bytes, &all, 30));
  shut_down_writing(&link);
  check("the client hears an event", t, run_until(has_event, &client, 30));
  check("the server read every byte, then EOF", t,
        server.events == 1 && server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING) && read_exactly(&server, data, 10));
  check("the client's event is EOF", t, client.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING));
  if (t == TCP)
    check("before it, the client read nothing of what the server wrote as it freed its end", t,
          evbuffer_get_length(client.bytes) == 0);
  else
    check("before it, the client read what the server wrote as it freed its end", t,
          read_exactly(&client, (const unsigned char*)"bye", 3));
  finish(&link, &client, &server);
}

static void take_none(struct evrdma_listener* listener, struct bufferevent* bev, const struct sockaddr* peer,
                      int socklen, void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  bufferevent_free(bev);
}

/* A connect to a port where nobody listens fails: BEV_EVENT_ERROR, ECONNREFUSED. */
static void a_connect_nobody_listens_to_is_refused(enum transport t) {
  struct sockaddr_in to = listener_address(t);
  struct seen seen;
  struct bufferevent* bev;
  if (t == TCP) {
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* a port nobody listens on: one the kernel picked, then freed */
    socklen_t length = sizeof to;
    to.sin_port = 0;
    if (fd < 0 || bind(fd, (struct sockaddr*)&to, sizeof to) != 0 || getsockname(fd, (struct sockaddr*)&to, &length) != 0)
      to.sin_port = htons(9); /* discard: not served in the test bed */
    if (fd >= 0) close(fd);
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    watch(bev, &seen);
    bufferevent_socket_connect(bev, (struct sockaddr*)&to, sizeof to);
  } else {
    struct evrdma_listener* gone;
    to.sin_port = 0;
    gone = evrdma_listener_new_bind(rbase, take_none, NULL, 0, 1, (struct sockaddr*)&to, sizeof to, NULL);
    to.sin_port = htons(gone != NULL ? evrdma_listener_get_port(gone) : 9);
    if (gone != NULL) evrdma_listener_free(gone);
    bev = evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, NULL);
    watch(bev, &seen);
  }
  check("the connect ends in an event", t, run_until(has_event, &seen, 30));
  check("BEV_EVENT_ERROR, ECONNREFUSED", t,
        seen.event[0] == BEV_EVENT_ERROR && seen.error[0] == ECONNREFUSED);
  bufferevent_free(bev);
  evbuffer_free(seen.bytes);
}

/* ---- A peer in a process of its own, which a case kills. */

enum { kPeerBytes = 20000 };

static void peer_read(struct bufferevent* bev, void* arg) {
  (void)arg;
  (void)bev;
  raise(SIGKILL); /* the server has read every byte: the peer dies, as a crashed program does */
}
static void peer_event(struct bufferevent* bev, short what, void* arg) {
  (void)bev;
  (void)arg;
  if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) exit(3);
}

/* bufferevent_conformance --peer tcp|rdma IP PORT: connects, writes kPeerBytes, and once the
 * server answers, kills itself (SIGKILL). */
int run_peer(int argc, char** argv) {
  static unsigned char data[kPeerBytes];
  struct sockaddr_in to;
  struct bufferevent* bev;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  if (argc != 3 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) return 2;
  to.sin_port = htons((unsigned short)atoi(argv[2]));
  base = event_base_new();
  if (strcmp(argv[0], "tcp") == 0) {
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bufferevent_socket_connect(bev, (struct sockaddr*)&to, sizeof to) != 0) return 2;
  } else {
    rbase = evrdma_base_new(base);
    bev = rbase != NULL ? evrdma_bufferevent_connect(rbase, (struct sockaddr*)&to, sizeof to, NULL) : NULL;
    if (bev == NULL) return 2;
  }
  fill(data, kPeerBytes, 9);
  bufferevent_setcb(bev, peer_read, NULL, peer_event, NULL);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  bufferevent_write(bev, data, kPeerBytes);
  event_base_dispatch(base);
  return 3;
}

static struct bufferevent* peer_accepted;
static void on_peer_accept(struct evconnlistener* listener, evutil_socket_t fd, struct sockaddr* peer, int socklen,
                           void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  peer_accepted = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
}
static void on_peer_accept_rdma(struct evrdma_listener* listener, struct bufferevent* bev,
                                const struct sockaddr* peer, int socklen, void* arg) {
  (void)listener;
  (void)peer;
  (void)socklen;
  (void)arg;
  peer_accepted = bev;
}
static int peer_is_in(void* arg) {
  (void)arg;
  return peer_accepted != NULL;
}

/* A peer's process killed (SIGKILL) once the server has read what it wrote: a socket's end reads
 * EOF (the peer's kernel closes its socket, FIN); a stream's hears BEV_EVENT_ERROR with
 * ECONNRESET, since RDMA carries no word from a dead process's kernel that its program would have
 * closed (docs/streams.md). Either way after every byte, and once. */
static void a_peer_killed_after_its_bytes_were_read_ends_the_stream_after_every_byte(enum transport t) {
  static unsigned char data[kPeerBytes];
  struct sockaddr_in at = listener_address(t);
  struct evconnlistener* tcp = NULL;
  struct evrdma_listener* rdma = NULL;
  struct seen server;
  struct wait_bytes all = {&server, kPeerBytes};
  char ip[INET_ADDRSTRLEN], port[8], self[4096];
  ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  pid_t pid;
  int status = 0;
  at.sin_port = 0; /* a listener of this case's own: the accepted end is the peer's */
  if (t == TCP)
    tcp = evconnlistener_new_bind(base, on_peer_accept, NULL, LEV_OPT_CLOSE_ON_FREE, 4, (struct sockaddr*)&at, sizeof at);
  else
    rdma = evrdma_listener_new_bind(rbase, on_peer_accept_rdma, NULL, 0, 4, (struct sockaddr*)&at, sizeof at, NULL);
  if ((tcp == NULL && rdma == NULL) || length <= 0) {
    check("a listener for the peer", t, 0);
    return;
  }
  self[length] = '\0';
  if (tcp != NULL) {
    socklen_t size = sizeof at;
    getsockname(evconnlistener_get_fd(tcp), (struct sockaddr*)&at, &size);
  } else {
    at.sin_port = htons(evrdma_listener_get_port(rdma));
  }
  inet_ntop(AF_INET, &at.sin_addr, ip, sizeof ip);
  snprintf(port, sizeof port, "%u", ntohs(at.sin_port));
  fill(data, kPeerBytes, 9);
  peer_accepted = NULL;
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    execl(self, self, "--peer", transport_names[t], ip, port, (char*)NULL);
    _exit(127);
  }
  check("the peer connects", t, pid > 0 && run_until(peer_is_in, NULL, 30));
  if (peer_accepted != NULL) {
    watch(peer_accepted, &server);
    check("every byte it wrote arrives", t, run_until(has_bytes, &all, 30) && read_exactly(&server, data, kPeerBytes));
    bufferevent_write(peer_accepted, "k", 1); /* the peer dies on reading it */
    check("once it is killed, the server hears an event", t, run_until(has_event, &server, 60));
    if (t == TCP)
      check("EOF while reading", t, server.event[0] == (BEV_EVENT_EOF | BEV_EVENT_READING));
    else
      check("BEV_EVENT_ERROR while reading, ECONNRESET", t,
            server.event[0] == (BEV_EVENT_ERROR | BEV_EVENT_READING) && server.error[0] == ECONNRESET);
    check("one event only", t, server.events == 1);
    bufferevent_free(peer_accepted);
    evbuffer_free(server.bytes);
  }
  if (pid > 0) waitpid(pid, &status, 0);
  check("the peer died of SIGKILL", t, pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  if (tcp != NULL) evconnlistener_free(tcp);
  if (rdma != NULL) evrdma_listener_free(rdma);
}

const struct test_case ends_cases[] = {
    CASE(bytes_arriving_while_reading_is_disabled_come_once_it_is_enabled),
    CASE(an_eof_arriving_while_reading_is_disabled_comes_after_every_byte_once_it_is_enabled),
    CASE(a_reader_that_pauses_in_each_read_callback_gets_every_byte_then_eof),
    CASE(an_eof_behind_bytes_left_in_the_input_waits_until_reading_is_enabled),
    CASE(flushing_sends_nothing_while_writing_is_disabled_and_finishes_nothing),
    CASE(an_end_freed_in_its_read_callback_gives_the_peer_eof),
    CASE(an_end_freed_in_its_write_callback_gives_the_peer_every_byte_then_eof),
    CASE(an_end_freed_in_its_eof_callback_gives_the_peer_eof),
    CASE(a_connect_nobody_listens_to_is_refused),
    CASE(a_peer_killed_after_its_bytes_were_read_ends_the_stream_after_every_byte),
    CASES_END,
};
