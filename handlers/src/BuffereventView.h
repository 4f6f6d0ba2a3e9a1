// BuffereventView: what a byte stream reads of a bufferevent (the program's end, the pair's ends)
// to decide, on every message, whether bytes may take the straight way past the pair and the
// filter. Through libevent's getters where it has them (input, output, enabled, watermarks,
// callbacks); straight from event2/bufferevent_struct.h (deprecated, but libevent 2.1's own
// layout) for the two it has no getter for, the read and write timeouts: a timeout set means the
// bytes must pass through the filter, which restarts it as they do. This is the one file that
// includes that header.
#pragma once

#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include <cstddef>

namespace evrdma::detail::bev {

inline evbuffer* inputOf(bufferevent* end) noexcept { return bufferevent_get_input(end); }
inline evbuffer* outputOf(bufferevent* end) noexcept { return bufferevent_get_output(end); }
inline bool readEnabled(bufferevent* end) noexcept { return (bufferevent_get_enabled(end) & EV_READ) != 0; }
inline bool writeEnabled(bufferevent* end) noexcept { return (bufferevent_get_enabled(end) & EV_WRITE) != 0; }
// The read high watermark (0: none).
inline size_t readHighWatermark(bufferevent* end) noexcept {
  size_t low = 0, high = 0;
  return bufferevent_getwatermark(end, EV_READ, &low, &high) == 0 ? high : 0;
}
// Whether the end has a read callback: libevent clears the pair's end's under a filter the moment
// the program's last reference on the filter goes.
inline bool hasReadCallback(bufferevent* end) noexcept {
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
