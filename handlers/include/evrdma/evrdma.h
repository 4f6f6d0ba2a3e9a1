/** \file
 * evrdma's C API: byte streams over RDMA as libevent's own `struct bufferevent`, for C programs.
 * An evrdma_base puts evrdma on the program's event_base; evrdma_bufferevent_connect hands back a
 * bufferevent at once, as bufferevent_socket_connect does (BEV_EVENT_CONNECTED or BEV_EVENT_ERROR
 * follows, the reason in EVUTIL_SOCKET_ERROR()), and an evrdma_listener hands its callback one per
 * accepted peer, as an evconnlistener does. Everything else is libevent's: bufferevent_setcb,
 * enable, write, read, watermarks, set_timeouts, bufferevent_free. See evrdma/Stream.h for the
 * semantics (events, back-pressure, what freeing sends).
 *
 * Calls that make something return NULL on failure with errno set; the others return 0 or -errno.
 * Everything runs on the event_base's thread.
 */
#ifndef EVRDMA_EVRDMA_H
#define EVRDMA_EVRDMA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct bufferevent;
struct evdns_base;

/** evrdma on one event_base (a Reactor borrowing it: the base stays the program's). */
struct evrdma_base;
/** A listener for streams, bound to an address and port. */
struct evrdma_listener;

/** Opt-in, once per process, best before anything of libevent's is made: libevent's memory then
 * comes from memory evrdma registers with the device (blocks of 1 KiB and up: evbuffer chains),
 * and streams send what the program wrote straight from its output evbuffer's chains, without a
 * second copy. The memory stays pinned while a device is open and is kept for reuse. 0, or
 * -ENOMEM (nothing changed). */
int evrdma_use_registered_memory(void);

/** NULL with errno set (ENOMEM, or what libevent refused). */
struct evrdma_base *evrdma_base_new(struct event_base *base);
/** Frees evrdma's part of the base. Streams still sending (freed by the program, or still held)
 * first send what was written, then their FIN, and disconnect, so that the peer reads every byte,
 * then EOF: the call returns once they are done, or after the linger time
 * (evrdma_base_set_linger), whichever comes first. Meanwhile only evrdma's own channels are served:
 * none of the program's callbacks runs. Then listeners and streams left are closed without a word
 * (a stream the program still holds reports BEV_EVENT_ERROR with ESHUTDOWN if its loop runs again). */
void evrdma_base_free(struct evrdma_base *rbase);
/** How long evrdma_base_free may wait for streams still sending: `msec` milliseconds (default
 * 5000). 0: none, the streams are reset at once and the peer hears ECONNRESET (as SO_LINGER 0). */
void evrdma_base_set_linger(struct evrdma_base *rbase, unsigned msec);
/** Adaptive polling (Reactor::setPollingWindow): after a completion, the base's completion queues
 * are polled on every loop turn for `usec` microseconds before the loop sleeps again, which saves
 * the wake-up a short round trip would otherwise wait for. Each such turn goes through the
 * event_base with a zero timeout, so the program's sockets, timers and signals are served in
 * between; it spends a core while data flows, nothing when idle. 0 (the default): never. */
void evrdma_base_set_polling_window(struct evrdma_base *rbase, unsigned usec);
/** The polling window stretches, up to `usec`, to 1.5 x the gap between completions the loop last
 * slept through (Reactor::setPollingStretch): round trips longer than the window (large writes, a
 * slow peer) are then found by polling too. 0 (the default): never. */
void evrdma_base_set_polling_stretch(struct evrdma_base *rbase, unsigned usec);

/** The turn budget (Reactor::setTurnBudget): how long one loop turn may spend handing out
 * completions, the callbacks' work included, before the event_base serves the program's sockets,
 * timers and signals again; the rest waits for the next turn. Default 500; 0: 256 completions per
 * turn, whatever they cost. */
void evrdma_base_set_turn_budget(struct evrdma_base *rbase, unsigned usec);

/** Options of a stream; fill with evrdma_stream_options_init, then change what you need. */
struct evrdma_stream_options {
  size_t max_message_size;        /**< bytes per message (writes are cut at it): 64 KiB */
  unsigned recv_depth;            /**< receive buffers: 16 */
  unsigned send_depth;            /**< send buffers: 16 */
  size_t receive_window;          /**< bytes held for a program that does not read: 1 MiB */
  size_t send_window;             /**< bytes taken from the program's output to send: 256 KiB */
  unsigned connect_timeout_ms;    /**< connecting: 10000 */
  unsigned keepalive_interval_ms; /**< probe a silent peer after this long: 0, never */
  size_t lend_from;               /**< received messages of at least this many bytes reach the input
                                       evbuffer in their receive buffer, without a copy: 1024
                                       (SIZE_MAX: always copy; see StreamOptions::lendFrom) */
  unsigned lending_buffers;       /**< spare receive buffers, which bound those lent at once: 16 */
  unsigned send_timeout_ms;       /**< a peer that takes none of the bytes waiting to go to it for
                                       this long fails the stream (BEV_EVENT_ERROR, ETIMEDOUT): 60000
                                       (0: wait for ever; see ConnectionOptions::creditTimeout) */
  int bev_options;                /**< BEV_OPT_* for the stream's bufferevent, as bufferevent_socket_new
                                       takes them: 0. BEV_OPT_CLOSE_ON_FREE and BEV_OPT_DEFER_CALLBACKS
                                       are what a stream always does (its callbacks are deferred
                                       with or without the option), BEV_OPT_UNLOCK_CALLBACKS is
                                       taken (there is no lock to release); BEV_OPT_THREADSAFE is
                                       refused, EOPNOTSUPP: a stream is served on its base's thread
                                       only. Anything else: EINVAL */
};
void evrdma_stream_options_init(struct evrdma_stream_options *options);

/** Starts connecting to a numeric IPv4 or IPv6 `address` and returns the program's bufferevent
 * (`options` NULL: the defaults). NULL with errno set: EINVAL (not an IPv4 / IPv6 address, or
 * unusable options), ENODEV (no RDMA CM), ENOMEM, or what the connect said at once. */
struct bufferevent *evrdma_bufferevent_connect(struct evrdma_base *rbase, const struct sockaddr *address, int socklen,
                                               const struct evrdma_stream_options *options);
/** As evrdma_bufferevent_connect, to a host name (or a numeric address), as
 * bufferevent_socket_connect_hostname: `dns_base` looks the name up without blocking the loop
 * (NULL: evrdma's own, made on first use from /etc/resolv.conf and /etc/hosts), `family` is
 * AF_UNSPEC, AF_INET or AF_INET6, and the connect goes to the first address found. The
 * bufferevent comes back at once; a failed lookup is BEV_EVENT_ERROR, its EVUTIL_EAI_* error then
 * told by bufferevent_socket_get_dns_error(bev), as libevent tells it. A `dns_base` of the
 * program's must outlive the lookups under way on it, as libevent requires; freeing the
 * bufferevent meanwhile cancels its lookup. NULL with errno set: EINVAL
 * (no name, a port out of range, another family, unusable options), or as evrdma_bufferevent_connect. */
struct bufferevent *evrdma_bufferevent_connect_hostname(struct evrdma_base *rbase, struct evdns_base *dns_base,
                                                        int family, const char *hostname, int port,
                                                        const struct evrdma_stream_options *options);
/** Half-close: what was written goes out, then the peer reads EOF; this side still reads.
 * 0, -EINVAL (not an evrdma stream), -ENOTCONN, -EALREADY. */
int evrdma_bufferevent_shutdown_write(struct bufferevent *bev);
/** 1 if `bev` is an evrdma stream (not freed), else 0. */
int evrdma_bufferevent_is_stream(struct bufferevent *bev);

/** RDMA, else TCP (docs/streams.md, "RDMA, else TCP"). */
enum evrdma_transport { EVRDMA_TRANSPORT_RDMA = 1, EVRDMA_TRANSPORT_TCP = 2 };
/** Called once per evrdma_connect_rdma_else_tcp, on the loop, never from inside the call: with the
 * connected bufferevent (the callback's to keep and free: an evrdma stream, or a socket's made with
 * BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS; it has no callbacks set and its CONNECTED event
 * has passed) and its transport, or with NULL and the TCP connect's errno. `rdma_tried_ms`: how
 * long the RDMA try took before TCP was tried (0 when no RDMA device serves the address). */
typedef void (*evrdma_connect_cb)(struct bufferevent *bev, int transport, int error, unsigned rdma_tried_ms,
                                  void *arg);
/** Connects over RDMA, else over TCP to the same address and port: TCP is tried once the RDMA try
 * failed (no device or route reaches the peer, or the peer takes no RDMA connection: refused) or
 * has not connected within `rdma_try_ms` (0: 3000). 0, or -EINVAL (a bad address, no callback,
 * unusable options); then `cb` is called once. Tries still under way when evrdma_base_free is
 * called end without their callback. A listener made with EVRDMA_LEV_OPT_ALSO_TCP takes both. */
int evrdma_connect_rdma_else_tcp(struct evrdma_base *rbase, const struct sockaddr *address, int socklen,
                                 const struct evrdma_stream_options *options, unsigned rdma_try_ms,
                                 evrdma_connect_cb cb, void *arg);

/** An evrdma flag for evrdma_listener_new_bind: take TCP connections too, at the same address and
 * port (a socket listener beside the RDMA one; port 0: the port the RDMA one got, picked again
 * where a TCP socket holds that number, up to 16 times), each handed to
 * the same callback as a socket's bufferevent (BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
 * evrdma_bufferevent_is_stream tells which). Where no RDMA device serves the address, the
 * listener takes TCP alone (evrdma_listener_takes_rdma: 0). Not with workers (EINVAL). On iWARP
 * the RDMA CM holds the TCP port itself: EADDRINUSE. */
#define EVRDMA_LEV_OPT_ALSO_TCP (1u << 24)

/** Called with each accepted stream's bufferevent (the callback's to keep and free) and the
 * peer's address. */
typedef void (*evrdma_listener_cb)(struct evrdma_listener *listener, struct bufferevent *bev,
                                   const struct sockaddr *peer, int socklen, void *arg);

/** Binds to `address` (port 0: any free one; see evrdma_listener_get_port) and listens
 * (`backlog` 0 or less: the kernel's limit). `flags`: LEV_OPT_* as evconnlistener_new_bind takes
 * them (docs/streams.md has the table):
 * - honoured: LEV_OPT_REUSEABLE (the port may be bound again while streams accepted on it live),
 *   LEV_OPT_DISABLED (made disabled: see evrdma_listener_disable), LEV_OPT_BIND_IPV6ONLY;
 * - what a listener always does, so taken: LEV_OPT_CLOSE_ON_FREE, LEV_OPT_CLOSE_ON_EXEC (no
 *   descriptor of evrdma's survives an exec), LEV_OPT_LEAVE_SOCKETS_BLOCKING (no socket is handed
 *   out), LEV_OPT_DEFERRED_ACCEPT (a stream is handed out once the peer's hello came, not its first
 *   byte);
 * - refused, EOPNOTSUPP: LEV_OPT_THREADSAFE (a listener is served on its base's thread only),
 *   LEV_OPT_REUSEABLE_PORT (the RDMA CM spreads no port's requests over several listeners).
 * NULL with errno set: EINVAL (also for an unknown flag), EOPNOTSUPP, EADDRINUSE, EADDRNOTAVAIL,
 * ENODEV... */
struct evrdma_listener *evrdma_listener_new_bind(struct evrdma_base *rbase, evrdma_listener_cb cb, void *arg,
                                                 unsigned flags, int backlog, const struct sockaddr *address,
                                                 int socklen, const struct evrdma_stream_options *options);
/** As evrdma_listener_new_bind, with `count` worker loops: each accepted stream lives on one of
 * them, in turn (its bufferevent on that worker's event_base), and `cb` is called on that
 * worker's thread. Each worker is an evrdma_base over an event_base that its own thread runs;
 * call evrdma_base_accept_posts on each before its loop runs. The workers must outlive the
 * listener. NULL with errno set, as evrdma_listener_new_bind (EINVAL also for a worker that does
 * not accept posts). */
struct evrdma_listener *evrdma_listener_new_bind_workers(struct evrdma_base *rbase, evrdma_listener_cb cb, void *arg,
                                                         unsigned flags, int backlog, const struct sockaddr *address,
                                                         int socklen, const struct evrdma_stream_options *options,
                                                         struct evrdma_base *const *workers, unsigned count);
/** Lets a listener on another thread hand streams to this base (a worker's): from then on it
 * watches an eventfd of its own, so its event_base always has an event. Call it on the base's
 * thread, or before its loop runs. 0 or -errno. */
int evrdma_base_accept_posts(struct evrdma_base *rbase);
/** While disabled, connect requests are refused (the client hears ECONNREFUSED at once, where a
 * socket listener's kernel would keep them in its backlog); enabling takes them again. 0. */
int evrdma_listener_enable(struct evrdma_listener *listener);
int evrdma_listener_disable(struct evrdma_listener *listener);
/** The port listened on. */
uint16_t evrdma_listener_get_port(const struct evrdma_listener *listener);
/** 1 if the listener takes RDMA connections, 0 if TCP alone (EVRDMA_LEV_OPT_ALSO_TCP, no RDMA device). */
int evrdma_listener_takes_rdma(const struct evrdma_listener *listener);
/** Stops listening; the streams it handed out go on. */
void evrdma_listener_free(struct evrdma_listener *listener);

#ifdef __cplusplus
}
#endif

#endif /* EVRDMA_EVRDMA_H */
