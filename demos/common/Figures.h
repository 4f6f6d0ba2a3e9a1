// Figures the pingpong programs print with -x: CPU use and the completion statistics.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "evrdma/CompletionStats.h"
#include "evrdma/Connection.h"
#include "evrdma/DeviceCounters.h"

namespace pingpong {

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
    auto seconds = [](const timeval& a, const timeval& b) {
      return static_cast<double>(b.tv_sec - a.tv_sec) + static_cast<double>(b.tv_usec - a.tv_usec) / 1e6;
    };
    char text[128];
    std::snprintf(text, sizeof text, "user %.1f%% system %.1f%% of %.3f s", wall > 0 ? 100 * seconds(start_.ru_utime, now.ru_utime) / wall : 0,
                  wall > 0 ? 100 * seconds(start_.ru_stime, now.ru_stime) / wall : 0, wall);
    return text;
  }

 private:
  rusage start_{};
  std::chrono::steady_clock::time_point wallStart_;
};

// The device a program used and its completion statistics, noted from any of its connections.
struct DeviceFigures {
  const evrdma::CompletionStats* completions = nullptr;
  ibv_context* device = nullptr;
  void note(const evrdma::Connection& c) {
    if (c.completionStats() == nullptr) return;
    completions = c.completionStats();
    device = c.device();
  }
};

// RNR NAKs of the device's port (device-wide; absent on devices without RNR, like siw).
inline std::string describeRnr(ibv_context* device) {
  evrdma::RnrCounters rnr = evrdma::readRnrCounters(device);
  if (!rnr.available) return "RNR counters: not available on this device";
  return "RNR NAKs (device-wide): received " + std::to_string(rnr.naksReceived) + ", sent " +
         std::to_string(rnr.naksSent) + ", retries exceeded " + std::to_string(rnr.retriesExceeded);
}

inline std::string describeCompletions(const evrdma::CompletionStats& s) {
  std::string text = "completion events " + std::to_string(s.events) + ", polls " + std::to_string(s.polls) +
                     ", empty first polls (arm race) " + std::to_string(s.emptyFirstPolls) + ", per poll:";
  for (size_t n = 0; n < s.perPoll.size(); ++n)
    if (s.perPoll[n] != 0) text += " " + std::to_string(n) + ":" + std::to_string(s.perPoll[n]);
  return text;
}

// What every program prints last with -x: its CPU use, and the completion statistics and RNR
// counters of the device it used (if it got as far as using one).
inline void printProcessFigures(const char* program, const CpuMeter& cpu, const DeviceFigures& figures) {
  std::printf("%s: cpu %s\n", program, cpu.report().c_str());
  if (figures.completions == nullptr) return;
  std::printf("%s: %s\n", program, describeCompletions(*figures.completions).c_str());
  std::printf("%s: %s\n", program, describeRnr(figures.device).c_str());
}

}  // namespace pingpong
