// Figures the pingpong programs print with -x: CPU use and the completion statistics.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include "evrdma/CompletionStats.h"
#include "evrdma/Connection.h"
#include "evrdma/DeviceCounters.h"

namespace pingpong {

// Seconds from one rusage time to a later one.
inline double secondsBetween(const timeval& from, const timeval& to) {
  return static_cast<double>(to.tv_sec - from.tv_sec) + static_cast<double>(to.tv_usec - from.tv_usec) / 1e6;
}

// CPU time of this process between construction and report(), as % of the wall time.
class CpuMeter {
 public:
  CpuMeter() { restart(); }
  void restart() {
    getrusage(RUSAGE_SELF, &start_);
    wallStart_ = std::chrono::steady_clock::now();
  }
  std::string report() const {
    rusage now{};
    getrusage(RUSAGE_SELF, &now);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart_).count();
    char text[128];
    std::snprintf(text, sizeof text, "user %.1f%% system %.1f%% of %.3f s", wall > 0 ? 100 * secondsBetween(start_.ru_utime, now.ru_utime) / wall : 0,
                  wall > 0 ? 100 * secondsBetween(start_.ru_stime, now.ru_stime) / wall : 0, wall);
    return text;
  }

 private:
  rusage start_{};
  std::chrono::steady_clock::time_point wallStart_;
};

// CPU time of this process over its transfer only, as the OFA notes' programs count it: from the
// first message of any connection to the last message of any (setup, teardown and idle listening
// left out). Thread-safe: workers note their agents' first and last messages.
class TransferMeter {
 public:
  void noteStart() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;
    started_ = true;
    getrusage(RUSAGE_SELF, &start_);
    wallStart_ = std::chrono::steady_clock::now();
  }
  void noteEnd() {
    std::lock_guard<std::mutex> lock(mutex_);
    getrusage(RUSAGE_SELF, &end_);
    wallEnd_ = std::chrono::steady_clock::now();
    ended_ = true;
  }
  // "user X% system Y% of T s", or empty before a whole transfer was seen.
  std::string report() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ || !ended_) return "";
    double wall = std::chrono::duration<double>(wallEnd_ - wallStart_).count();
    char text[160];
    std::snprintf(text, sizeof text, "user %.1f%% system %.1f%% of %.3f s (user %.3f s, system %.3f s)",
                  wall > 0 ? 100 * secondsBetween(start_.ru_utime, end_.ru_utime) / wall : 0,
                  wall > 0 ? 100 * secondsBetween(start_.ru_stime, end_.ru_stime) / wall : 0, wall,
                  secondsBetween(start_.ru_utime, end_.ru_utime), secondsBetween(start_.ru_stime, end_.ru_stime));
    return text;
  }

 private:
  mutable std::mutex mutex_;
  bool started_ = false, ended_ = false;
  rusage start_{}, end_{};
  std::chrono::steady_clock::time_point wallStart_, wallEnd_;
};

// The figures of one connection's transfer as ping-sr prints them: `roundTrips` of `size` bytes
// in `seconds`, as round trips/s, messages/s (sends + receives, as the OFA notes count them), Mb/s
// both ways and microseconds per round trip.
inline std::string transferFigures(uint64_t roundTrips, uint64_t size, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(roundTrips) / seconds : 0;
  char text[200];
  std::snprintf(text, sizeof text,
                "%.0f round trips/s, %.0f messages/s (sends + receives), %.2f Mb/s (both ways), %.1f us per round trip",
                rate, 2 * rate, 2.0 * rate * static_cast<double>(size) * 8 / 1e6,
                roundTrips > 0 ? seconds * 1e6 / static_cast<double>(roundTrips) : 0.0);
  return text;
}

// The device a program used and its completion statistics, noted from any of its connections.
struct DeviceFigures {
  const evrdma::CompletionStats* completions = nullptr;  // the Reactor keeps them
  std::string device;  // its name: the device may be removed before the figures are printed
  void note(const evrdma::Connection& c) {
    if (c.completionStats() == nullptr) return;
    completions = c.completionStats();
    if (c.device() != nullptr && c.device()->device != nullptr) device = ibv_get_device_name(c.device()->device);
  }
};

// RNR NAKs of the device's port (device-wide; absent on devices without RNR, like siw).
inline std::string describeRnr(const std::string& device) {
  evrdma::RnrCounters rnr = evrdma::readRnrCounters(device);
  if (!rnr.available) return "RNR counters: not available on this device";
  return "RNR NAKs (device-wide): received " + std::to_string(rnr.naksReceived) + ", sent " +
         std::to_string(rnr.naksSent) + ", retries exceeded " + std::to_string(rnr.retriesExceeded);
}

inline std::string describeCompletions(const evrdma::CompletionStats& s) {
  std::string text = "completions " + std::to_string(s.completions) + ", ibv_get_cq_event calls " +
                     std::to_string(s.events) + ", ibv_poll_cq calls " + std::to_string(s.polls) +
                     ", empty first polls (arm race) " + std::to_string(s.emptyFirstPolls);
  if (s.spinTurns != 0)
    text += ", polling turns " + std::to_string(s.spinTurns) + " (windows " + std::to_string(s.pollingWindows) +
            ", sleeps " + std::to_string(s.sleeps) + ", stretched " + std::to_string(s.pollingStretches) + ")";
  text += ", ibv_poll_cq histogram (completions:polls):";
  for (size_t n = 0; n < s.perPoll.size(); ++n)
    if (s.perPoll[n] != 0) text += " " + std::to_string(n) + ":" + std::to_string(s.perPoll[n]);
  return text;
}

// What every program prints last with -x: its CPU use, and the completion statistics and RNR
// counters of the device it used (if it got as far as using one).
inline void printProcessFigures(const char* program, const CpuMeter& cpu, const DeviceFigures& figures,
                                const TransferMeter* transfer = nullptr) {
  std::printf("%s: cpu %s\n", program, cpu.report().c_str());
  if (transfer != nullptr && !transfer->report().empty())
    std::printf("%s: cpu over the transfer (first message to last) %s\n", program, transfer->report().c_str());
  if (figures.completions == nullptr) return;
  std::printf("%s: %s\n", program, describeCompletions(*figures.completions).c_str());
  std::printf("%s: %s\n", program, describeRnr(figures.device).c_str());
}

}  // namespace pingpong
