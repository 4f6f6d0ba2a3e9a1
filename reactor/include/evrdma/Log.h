/// \file
/// Log: where evrdma reports what it otherwise only counts (a failed arm of a completion queue, a CM
/// event for an id nobody owns any more, a stray completion, a rejected connect request and why, a
/// connection's failure, a keepalive timeout...), in libevent's style (event_set_log_callback).
/// Until setLogCallback is called nothing is reported. Messages come from the thread whose loop met
/// the event (with ListenerOptions::workers, several at once): the callback must be thread-safe.
#pragma once

#include <functional>

namespace evrdma {

enum class LogLevel : int {
  Debug = 0,  ///< the ordinary course of things, worth seeing when chasing a problem (budget yields)
  Info = 1,   ///< one connection's fate (a reject, a failure the handler also hears as onError)
  Warn = 2,   ///< something the library had to drop or work around (stray completions, orphan events)
  Error = 3,  ///< the library cannot do what it must (a completion queue that cannot be armed)
  Off = 4,
};
const char* toString(LogLevel level) noexcept;

using LogCallback = std::function<void(LogLevel level, const char* message)>;

/// Reports every message at `minimum` or above to `callback` (which must not throw; the message is
/// valid during the call). An empty callback, or LogLevel::Off, turns reporting off. Safe from any
/// thread; a message being reported while the callback is replaced goes to one or the other.
void setLogCallback(LogLevel minimum, LogCallback callback);
/// A callback that writes "evrdma [warn] message" lines to stderr.
void logToStderr(LogLevel level, const char* message) noexcept;

}  // namespace evrdma
