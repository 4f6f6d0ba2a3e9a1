// The log callback and level (Log.h), and logf(), which formats only what the level lets through.
#include "Logging.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace evrdma {
namespace detail {

std::atomic<int> minimumLogLevel{static_cast<int>(LogLevel::Off)};

namespace {
std::mutex callbackMutex;
LogCallback& callback() {
  static LogCallback* fn = new LogCallback;  // never destroyed: logging may outlive static destructors
  return *fn;
}
}  // namespace

void logMessage(LogLevel level, const char* format, ...) noexcept {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  // Held while the callback runs, so replacing it never frees one that is running.
  std::lock_guard<std::mutex> lock(callbackMutex);
  if (callback()) callback()(level, text);
}

}  // namespace detail

const char* toString(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
    case LogLevel::Off: return "off";
  }
  return "?";
}

void setLogCallback(LogLevel minimum, LogCallback fn) {
  std::lock_guard<std::mutex> lock(detail::callbackMutex);
  const bool off = !fn || minimum == LogLevel::Off;
  detail::callback() = off ? LogCallback() : std::move(fn);
  detail::minimumLogLevel.store(static_cast<int>(off ? LogLevel::Off : minimum), std::memory_order_relaxed);
}

void logToStderr(LogLevel level, const char* message) noexcept {
  std::fprintf(stderr, "evrdma [%s] %s\n", toString(level), message);
}

}  // namespace evrdma
