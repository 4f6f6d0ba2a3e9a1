// BuffereventView: what a byte stream reads of a bufferevent (the program's end, the pair's ends)
// to decide, on every message, whether bytes may take the straight way past the pair and the
// filter. This is the one file that includes event2/bufferevent_struct.h (deprecated, but
// libevent 2.1's own layout), for two reasons:
// - the read and write timeouts have no getter in libevent 2.1: a timeout set means the bytes
//   must pass through the filter, which restarts it as they do;
// - three more are read on every message (enabled, the read high watermark, the read callback),
//   and their getters are calls that take the bufferevent's lock: a 64 B ping-pong's client made
//   about seven of them a round trip, ~240 instructions (3.5 % of its round trip). They are read
//   from the fields only once fieldsAgree() has found, on a scratch bufferevent set to values of
//   its own, that every field says what its getter says; a libevent whose layout differs is read
//   through the getters instead, never wrongly;
// - writing enabled again must send what waits, as a socket's end does, but a libevent filter's
//   enable only (re)starts its write timeout: the one thing that moves is the timeout's event
//   (`ev_write`). So the program's end's write-timeout event is evrdma's (hookWriteEnable), and
//   with no write timeout of the program's its timeout holds a mark (kEnableMark) in place of
//   none: bufferevent_enable(EV_WRITE) adds the event, which tells the stream on the loop's next
//   pass. Behind the same layout check; without it, the difference stays (docs/streams.md).
//   Reading enabled again likewise (hookReadEnable): what reached the pair under the program's end
//   while it did not read moves on, and an EOF held meanwhile is told.
// The input and output evbuffers are taken through their getters, once per end (ByteStream).
// Rate limits (bufferevent_set_rate_limit, rate-limit groups) are applied by libevent in socket
// bufferevents only, not in filters: a stream applies its program's end's own, through libevent's
// figures (bufferevent_get_max_to_read / _write) and libevent's own accounting
// (bufferevent_decrement_{read,write}_buckets_, which suspend reading or writing once a bucket is
// spent and resume it on the refill, as a socket's do).
#pragma once

#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/util.h>

#include <atomic>
#include <cstddef>
#include <cstring>

struct bufferevent_private;  // libevent's own; its first member is the struct bufferevent
extern "C" int bufferevent_decrement_read_buckets_(bufferevent_private* end, ev_ssize_t bytes);
extern "C" int bufferevent_decrement_write_buckets_(bufferevent_private* end, ev_ssize_t bytes);
// libevent's own too (event-internal.h; libevent_core exports them): a deferred callback unscheduled, scheduled.
extern "C" void event_deferred_cb_cancel_(event_base* base, event_callback* cb);
extern "C" int event_deferred_cb_schedule_(event_base* base, event_callback* cb);

namespace evrdma::detail::bev {

inline evbuffer* inputOf(bufferevent* end) noexcept { return bufferevent_get_input(end); }
inline evbuffer* outputOf(bufferevent* end) noexcept { return bufferevent_get_output(end); }

namespace layout {
enum : int { kUnchecked, kAgrees, kDiffers };
inline std::atomic<int> state{kUnchecked};
inline void markRead(bufferevent*, void*) {}  // a read callback to recognise
// libevent 2.1's struct bufferevent_private (bufferevent-internal.h) up to its rate limits: only
// the offsets of the last three fields are used, and only where fieldsAgree() has found the two
// largest where this says and the third empty, then set as the scratch end got a rate limit.
struct PrivatePrefix {
  bufferevent bev;
  void* readWatermarksCb;
  unsigned ownLock : 1, readcbPending : 1, writecbPending : 1, connecting : 1, connectionRefused : 1;
  short eventcbPending;
  ev_uint16_t readSuspended, writeSuspended;
  int errnoPending;
  int dnsError;
  event_callback deferred;
  int options;
  int refcnt;
  void* lock;
  ev_ssize_t maxSingleRead, maxSingleWrite;
  void* rateLimiting;
};
template <typename T>
T readAt(const bufferevent* end, size_t offset) noexcept {
  T value;
  std::memcpy(&value, reinterpret_cast<const char*>(end) + offset, sizeof value);
  return value;
}
inline event_callback* deferredOf(bufferevent* end) noexcept {
  return reinterpret_cast<event_callback*>(reinterpret_cast<char*>(end) + offsetof(PrivatePrefix, deferred));
}
inline int refcountOf(const bufferevent* end) noexcept { return readAt<int>(end, offsetof(PrivatePrefix, refcnt)); }
inline bool runScheduled(bufferevent* end) noexcept {
  return (deferredOf(end)->evcb_flags & (EVLIST_ACTIVE | EVLIST_ACTIVE_LATER)) != 0;
}
// Whether the end's last reference went: libevent finalizes it (when that happened inside a run
// of its callbacks, the finalizer is scheduled on the very callback that ran them).
inline bool finalizing(bufferevent* end) noexcept {
  return refcountOf(end) <= 0 || (deferredOf(end)->evcb_flags & EVLIST_FINALIZING) != 0;
}
inline bool rateLimited(const bufferevent* end) noexcept {
  return readAt<void*>(end, offsetof(PrivatePrefix, rateLimiting)) != nullptr;
}
}  // namespace layout

// Sets the end's DNS error, which bufferevent_socket_get_dns_error tells (libevent has no setter
// for it). True.
inline bool setDnsErrorField(bufferevent* end, int error) noexcept {
  std::memcpy(reinterpret_cast<char*>(end) + offsetof(layout::PrivatePrefix, dnsError), &error, sizeof error);
  return true;
}

// libevent runs an end's callbacks deferred (BEV_OPT_DEFER_CALLBACKS): a run, once scheduled,
// holds a reference on the end until it has run. But event_base_free drops a scheduled run unrun,
// its reference with it, and the end (a pair's: both ends, linked) is never freed: a program that
// freed its stream, evrdma_base and event_base with no loop pass between leaked them. Where the
// fields agree, a stream takes such runs off the base (each helper: false or nothing otherwise).
//
// Unschedules the end's run (what it will call stays marked) and drops its reference: true if one
// was scheduled. The caller holds a reference of its own, or the program does.
inline bool unscheduleRun(bufferevent* end, bool fields) noexcept {
  if (!fields || layout::finalizing(end) || !layout::runScheduled(end)) return false;
  event_deferred_cb_cancel_(end->ev_base, layout::deferredOf(end));
  bufferevent_decref(end);
  return true;
}
// Schedules a run unscheduled by unscheduleRun again, as libevent does (with a reference).
inline void rescheduleRun(bufferevent* end) noexcept {
  if (event_deferred_cb_schedule_(end->ev_base, layout::deferredOf(end)) != 0) bufferevent_incref(end);
}
// An end whose callbacks are all cleared: a run would call nothing, only drop its reference, so
// it is unscheduled here (true if one was).
inline bool dropIdleDeferredRun(bufferevent* end, bool fields) noexcept {
  if (end->readcb != nullptr || end->writecb != nullptr || end->errorcb != nullptr) return false;
  return unscheduleRun(end, fields);
}

namespace layout {
inline void markWrite(bufferevent*, void*) {}
// On a pair made with deferred callbacks: a run scheduled as libevent schedules one (its deferred
// callback, whose argument is the end, made active; a reference), then dropped by
// dropIdleDeferredRun.
inline bool deferredRunsAgree(event_base* base) noexcept {
  bufferevent* pair[2] = {nullptr, nullptr};
  if (bufferevent_pair_new(base, BEV_OPT_DEFER_CALLBACKS, pair) != 0) return false;
  bufferevent* end = pair[0];
  bool agrees = refcountOf(end) == 1 && deferredOf(end)->evcb_arg == end && !runScheduled(end);
  bufferevent_setcb(end, nullptr, markWrite, nullptr, nullptr);
  bufferevent_enable(end, EV_WRITE);
  bufferevent_enable(pair[1], EV_READ);
  bufferevent_write(end, "x", 1);  // passed to pair[1]: end's output drained, its write callback due
  agrees = agrees && runScheduled(end) && refcountOf(end) == 2;
  bufferevent_setcb(end, nullptr, nullptr, nullptr, nullptr);
  if (agrees) {  // (else the run is left to libevent: the next loop pass runs it)
    agrees = dropIdleDeferredRun(end, true) && !runScheduled(end) && refcountOf(end) == 1;
  }
  bufferevent_free(pair[0]);
  bufferevent_free(pair[1]);
  return agrees;
}
}  // namespace layout

// Whether the fields may be read in place of the getters: checked once per process, on a pair
// made on `base` for it (any stream's base: the layout is the library's).
inline bool fieldsAgree(event_base* base) noexcept {
  int state = layout::state.load(std::memory_order_relaxed);
  if (state != layout::kUnchecked) return state == layout::kAgrees;
  bufferevent* pair[2] = {nullptr, nullptr};
  if (base == nullptr || bufferevent_pair_new(base, 0, pair) != 0) return false;  // asked again next time
  bufferevent* end = pair[0];
  bufferevent_setcb(end, layout::markRead, nullptr, nullptr, nullptr);
  bufferevent_setwatermark(end, EV_READ, 3, 12345);
  const timeval writeTimeout{5, 6};
  bufferevent_set_timeouts(end, nullptr, &writeTimeout);
  bufferevent_enable(end, EV_READ);
  bufferevent_disable(end, EV_WRITE);
  bufferevent_set_max_single_read(end, 12346);
  bufferevent_set_max_single_write(end, 23457);
  const bool unlimited = !layout::rateLimited(end);
  const bool dnsError = setDnsErrorField(end, 4242) && bufferevent_socket_get_dns_error(end) == 4242 &&
                        setDnsErrorField(end, 0);
  const timeval tick{1, 0};
  ev_token_bucket_cfg* limit = ev_token_bucket_cfg_new(1000, 1000, 1000, 1000, &tick);
  const bool limits = limit != nullptr && bufferevent_set_rate_limit(end, limit) == 0 && layout::rateLimited(end);
  size_t low = 0, high = 0;
  bufferevent_data_cb readcb = nullptr;
  bufferevent_getwatermark(end, EV_READ, &low, &high);
  bufferevent_getcb(end, &readcb, nullptr, nullptr, nullptr);
  const bool agrees = end->enabled == bufferevent_get_enabled(end) && end->enabled == EV_READ &&
                      end->wm_read.high == high && high == 12345 && end->readcb == readcb && readcb == layout::markRead &&
                      end->timeout_write.tv_sec == 5 && end->timeout_write.tv_usec == 6 && end->timeout_read.tv_sec == 0 &&
                      event_get_base(&end->ev_write) == base && event_get_callback(&end->ev_write) != nullptr &&
                      layout::readAt<ev_ssize_t>(end, offsetof(layout::PrivatePrefix, maxSingleRead)) == 12346 &&
                      layout::readAt<ev_ssize_t>(end, offsetof(layout::PrivatePrefix, maxSingleWrite)) == 23457 &&
                      unlimited && limits && dnsError && layout::deferredRunsAgree(base);
  bufferevent_free(pair[0]);
  bufferevent_free(pair[1]);
  if (limit != nullptr) ev_token_bucket_cfg_free(limit);
  state = agrees ? layout::kAgrees : layout::kDiffers;
  layout::state.store(state, std::memory_order_relaxed);
  return agrees;
}

// Each read below is the field's with `fields` (what fieldsAgree() answered: a stream asks once,
// when it is made, and keeps the answer), else the getter's.
inline short enabledOf(bufferevent* end, bool fields) noexcept { return fields ? end->enabled : bufferevent_get_enabled(end); }
inline bool readEnabled(bufferevent* end, bool fields) noexcept { return (enabledOf(end, fields) & EV_READ) != 0; }
inline bool writeEnabled(bufferevent* end, bool fields) noexcept { return (enabledOf(end, fields) & EV_WRITE) != 0; }
// The read high watermark (0: none).
inline size_t readHighWatermark(bufferevent* end, bool fields) noexcept {
  if (fields) return end->wm_read.high;
  size_t low = 0, high = 0;
  return bufferevent_getwatermark(end, EV_READ, &low, &high) == 0 ? high : 0;
}
// Whether the end has a read callback: libevent clears the pair's end's under a filter the moment
// the program's last reference on the filter goes.
inline bool hasReadCallback(bufferevent* end, bool fields) noexcept {
  if (fields) return end->readcb != nullptr;
  bufferevent_data_cb readcb = nullptr;
  bufferevent_getcb(end, &readcb, nullptr, nullptr, nullptr);
  return readcb != nullptr;
}
// The mark a hooked end's write timeout holds while the program has set none (1 µs: no program
// asks for that).
inline constexpr timeval kEnableMark{0, 1};
inline bool isEnableMark(const timeval& t) noexcept {
  return evutil_timercmp(&t, &kEnableMark, ==);
}

// No getter in libevent 2.1: the fields. A read timeout of the program's (the mark is none).
inline bool hasReadTimeout(const bufferevent* end) noexcept {
  return evutil_timerisset(&end->timeout_read) && !isEnableMark(end->timeout_read);
}
// A write timeout of the program's (the mark is none).
inline bool hasWriteTimeout(const bufferevent* end) noexcept {
  return evutil_timerisset(&end->timeout_write) && !isEnableMark(end->timeout_write);
}

// Makes `end`'s write-timeout event call `callback(arg)`, and puts the mark in its write timeout;
// the event's own callback and argument are kept in `ownCallback` and `ownArg` (a timeout of the
// program's runs them). Only where the fields agree, on an end whose event is not pending (a new
// one). False, and nothing changed, otherwise.
inline bool hookEnable(event* timeout, timeval& timeoutField, event_callback_fn callback, void* arg,
                       event_callback_fn& ownCallback, void*& ownArg) noexcept {
  // (arg null: the event keeps its own, the bufferevent.)
  if (event_pending(timeout, EV_TIMEOUT, nullptr)) return false;
  event_callback_fn own = event_get_callback(timeout);
  void* const ownContext = event_get_callback_arg(timeout);
  const int priority = event_get_priority(timeout);
  if (own == nullptr || event_assign(timeout, event_get_base(timeout), -1, event_get_events(timeout), callback,
                                     arg != nullptr ? arg : ownContext) != 0)
    return false;
  ownCallback = own;
  ownArg = ownContext;
  (void)event_priority_set(timeout, priority);
  timeoutField = kEnableMark;
  return true;
}
inline bool hookWriteEnable(bufferevent* end, event_callback_fn callback, void* arg, event_callback_fn& ownCallback,
                            void*& ownArg) noexcept {
  return hookEnable(&end->ev_write, end->timeout_write, callback, arg, ownCallback, ownArg);
}
// The same for reading: a filter's enable(EV_READ), whether the program's or libevent's own as a
// watermark or a rate limit lets reading resume, adds the read-timeout event; the stream then
// moves on what was left under the program's end (libevent's filter takes it only as more comes).
// The event's argument stays the bufferevent: libevent finalizes a freed bufferevent with the
// argument of its read-timeout event (event_callback_finalize_many_ takes the first of its events).
inline bool hookReadEnable(bufferevent* end, event_callback_fn callback, event_callback_fn& ownCallback,
                           void*& ownArg) noexcept {
  return hookEnable(&end->ev_read, end->timeout_read, callback, nullptr, ownCallback, ownArg);
}
// The mark again where the program has cleared its timeouts (bufferevent_set_timeouts with NULL).
inline void keepEnableMark(bufferevent* end) noexcept {
  if (!evutil_timerisset(&end->timeout_write)) end->timeout_write = kEnableMark;
}
inline void keepReadEnableMark(bufferevent* end) noexcept {
  if (!evutil_timerisset(&end->timeout_read)) end->timeout_read = kEnableMark;
}
// Runs the hooked write-timeout event's callback on the loop's next pass (if the loop runs again):
// an event of the end's own holds no reference on it, unlike a deferred callback, so a program
// that frees the end and then its base with no loop pass between leaks nothing.
inline void activateWriteHook(bufferevent* end) noexcept { event_active(&end->ev_write, EV_TIMEOUT, 1); }
// Whether the hooked event fired for the mark (writing enabled, or the filter passed bytes on),
// not for a write timeout of the program's.
inline bool firedForEnableMark(const bufferevent* end) noexcept { return isEnableMark(end->timeout_write); }
inline bool firedForReadEnableMark(const bufferevent* end) noexcept { return isEnableMark(end->timeout_read); }

// What the program's end may read or write now under its rate limits (its own and its group's),
// and whether a limit binds: libevent's figure is max_single_read / max_single_write where none
// does, 16 KiB unless the program changed it (a program that lowered it is held to it, as a
// socket's reads and writes are).
// With `fields`, an end without a rate limit is answered from its fields (a call apiece cost a
// 64 B round trip ~140 instructions).
inline ev_ssize_t readAllowance(bufferevent* end, bool fields) noexcept {
  if (fields && !layout::rateLimited(end))
    return layout::readAt<ev_ssize_t>(end, offsetof(layout::PrivatePrefix, maxSingleRead));
  return bufferevent_get_max_to_read(end);
}
inline ev_ssize_t writeAllowance(bufferevent* end, bool fields) noexcept {
  if (fields && !layout::rateLimited(end))
    return layout::readAt<ev_ssize_t>(end, offsetof(layout::PrivatePrefix, maxSingleWrite));
  return bufferevent_get_max_to_write(end);
}
inline constexpr ev_ssize_t kDefaultMaxSingle = 16384;  // libevent 2.1's MAX_SINGLE_{READ,WRITE}_DEFAULT
inline bool limitBinds(ev_ssize_t allowance) noexcept { return allowance < kDefaultMaxSingle; }
// `bytes` read or written by the program's end, charged to its buckets (nothing where it has no
// rate limit).
inline void chargeRead(bufferevent* end, size_t bytes, bool fields) noexcept {
  if (fields && !layout::rateLimited(end)) return;
  (void)bufferevent_decrement_read_buckets_(reinterpret_cast<bufferevent_private*>(end),
                                            static_cast<ev_ssize_t>(bytes));
}
inline void chargeWrite(bufferevent* end, size_t bytes, bool fields) noexcept {
  if (fields && !layout::rateLimited(end)) return;
  (void)bufferevent_decrement_write_buckets_(reinterpret_cast<bufferevent_private*>(end),
                                             static_cast<ev_ssize_t>(bytes));
}

// A failed lookup's error, for bufferevent_socket_get_dns_error (where the fields agree; else the
// program hears only the BEV_EVENT_ERROR).
inline void setDnsError(bufferevent* end, int error, bool fields) noexcept {
  if (fields) (void)setDnsErrorField(end, error);
}

}  // namespace evrdma::detail::bev
