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
//   through the getters instead, never wrongly.
// The input and output evbuffers are taken through their getters, once per end (ByteStream).
#pragma once

#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include <atomic>
#include <cstddef>

namespace evrdma::detail::bev {

inline evbuffer* inputOf(bufferevent* end) noexcept { return bufferevent_get_input(end); }
inline evbuffer* outputOf(bufferevent* end) noexcept { return bufferevent_get_output(end); }

namespace layout {
enum : int { kUnchecked, kAgrees, kDiffers };
inline std::atomic<int> state{kUnchecked};
inline void markRead(bufferevent*, void*) {}  // a read callback to recognise
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
  bufferevent_enable(end, EV_READ);
  bufferevent_disable(end, EV_WRITE);
  size_t low = 0, high = 0;
  bufferevent_data_cb readcb = nullptr;
  bufferevent_getwatermark(end, EV_READ, &low, &high);
  bufferevent_getcb(end, &readcb, nullptr, nullptr, nullptr);
  const bool agrees = end->enabled == bufferevent_get_enabled(end) && end->enabled == EV_READ &&
                      end->wm_read.high == high && high == 12345 && end->readcb == readcb && readcb == layout::markRead;
  bufferevent_free(pair[0]);
  bufferevent_free(pair[1]);
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
// No getter in libevent 2.1: the fields.
inline bool hasReadTimeout(const bufferevent* end) noexcept {
  return end->timeout_read.tv_sec != 0 || end->timeout_read.tv_usec != 0;
}
inline bool hasWriteTimeout(const bufferevent* end) noexcept {
  return end->timeout_write.tv_sec != 0 || end->timeout_write.tv_usec != 0;
}

}  // namespace evrdma::detail::bev
